"""What keeps an installed engine from loading in this process (one owner for the rule)."""

from __future__ import annotations

import os

__all__ = ["openvino_unloadable"]


def openvino_unloadable() -> str | None:
    """Why OpenVINO cannot be loaded in this process, or None where it can be tried.

    Under AddressSanitizer (its runtime in ``LD_PRELOAD``, as ``fuzz/sanitize.py`` runs the
    tests) OpenVINO's TBB dlopens with ``RTLD_DEEPBIND``, which ASan refuses by aborting the
    process: asking OpenVINO anything there would end the caller, so callers skip it instead.
    """
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        return "OpenVINO cannot load under AddressSanitizer (LD_PRELOAD)"
    return None
