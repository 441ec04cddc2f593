"""What the engines can do in this process, one owner for each rule: what keeps an installed
engine from loading (:func:`openvino_unloadable`), and what OpenVINO's CPU plugin computes
here (:func:`cpu_capabilities`; BF16: :func:`bf16_refusal`, :func:`bf16_available`), asked
by the compiler, the OpenVINO backend and the apps alike."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ._cpu import cpu_info
from ._errors import UnsupportedError

__all__ = [
    "BF16",
    "bf16_available",
    "bf16_refusal",
    "cpu_capabilities",
    "openvino_core",
    "openvino_unloadable",
]

#: OpenVINO's name of the capability (``OPTIMIZATION_CAPABILITIES`` of the CPU plugin).
BF16 = "BF16"


def openvino_unloadable() -> str | None:
    """Why OpenVINO cannot be loaded in this process, or None where it can be tried.

    Under AddressSanitizer (its runtime in ``LD_PRELOAD``, as ``fuzz/sanitize.py`` runs the
    tests) OpenVINO's TBB dlopens with ``RTLD_DEEPBIND``, which ASan refuses by aborting the
    process: asking OpenVINO anything there would end the caller, so callers skip it instead.
    """
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        return "OpenVINO cannot load under AddressSanitizer (LD_PRELOAD)"
    return None


def openvino_core(why: str) -> Any:
    """A new ``openvino.Core``; UnsupportedError in one line, ``why`` first, where OpenVINO
    is not installed or cannot load in this process (:func:`openvino_unloadable`)."""
    unloadable = openvino_unloadable()
    if unloadable:
        raise UnsupportedError(f"{why}: {unloadable}")
    try:
        import openvino as ov
    except ImportError as exc:
        raise UnsupportedError(
            f"{why}: openvino is not installed (pip install copyless[openvino])"
        ) from exc
    return ov.Core()


def cpu_capabilities(core: Any = None) -> tuple[str, ...]:
    """OpenVINO's ``OPTIMIZATION_CAPABILITIES`` of the CPU plugin (``"FP32"``, ``"BF16"``,
    ``"INT8"``...), asked of ``core`` (an ``openvino.Core``; a new one when None:
    UnsupportedError where OpenVINO is not installed or cannot load here)."""
    if core is None:
        core = openvino_core("OpenVINO's CPU capabilities are unknown")
    return tuple(str(c) for c in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def bf16_refusal(capabilities: Iterable[str]) -> str | None:
    """Why BF16 is refused on a CPU whose OpenVINO ``capabilities`` lack it (a clause for
    one error line); None when the CPU has BF16 arithmetic."""
    listed = [str(c) for c in capabilities]
    if BF16 in listed:
        return None
    return (
        f"this CPU ({cpu_info().name}) has no BF16 arithmetic (OpenVINO's "
        f"OPTIMIZATION_CAPABILITIES: {', '.join(listed) or 'none'}; BF16 needs AVX512_BF16 or "
        "AMX)"
    )


def bf16_available() -> bool:
    """Whether OpenVINO is installed and computes BF16 on this CPU (never raises)."""
    try:
        return bf16_refusal(cpu_capabilities()) is None
    except (UnsupportedError, RuntimeError):
        return False
