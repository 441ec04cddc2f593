"""The packages of the ``vision`` extra (simplejpeg, Pillow), imported when first used.

The core of copyless (tensors, compiler, runner) does not need them, so they are not core
dependencies; ``import copyless.vision`` works without them and the first decode or drawing
call says what to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..types import UnsupportedError

INSTALL_HINT = "pip install 'copyless[vision]'"


def need(module: str) -> ModuleType:
    """Import ``module`` (e.g. ``"simplejpeg"``, ``"PIL.Image"``), or UnsupportedError."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UnsupportedError(
            f"{module.split('.')[0]} is not installed: image decoding and drawing need "
            f"copyless's 'vision' extra ({INSTALL_HINT})"
        ) from exc
