"""Models the zoo takes as their package ships them: read, checked, IR version lowered."""

from __future__ import annotations

from collections.abc import Callable

import onnx

from ...types import ModelLoadError
from .._graph import PARSE_ERRORS
from ._graph import IR_VERSION
from ._sources import package_file

__all__ = ["shipped_model"]

Tick = Callable[[int], None]


def shipped_model(
    package: str,
    relative: str,
    tick: Tick | None = None,
    check: Callable[[onnx.ModelProto], None] | None = None,
) -> bytes:
    """The ONNX bytes of ``relative`` in ``package``, IR version lowered to 10 only where it
    is higher; ``check`` may raise ModelLoadError for a file that is not the expected model.

    Copies: the file is read once; it is re-serialized only when its IR version changes.
    Ticks twice (read, checked)."""
    raw = package_file(package, relative).read_bytes()
    if tick:
        tick(1)
    try:
        model = onnx.load_from_string(raw)
    except PARSE_ERRORS as exc:
        raise ModelLoadError(f"{relative} in {package} is not a readable ONNX model") from exc
    if check is not None:
        check(model)
    if model.ir_version > IR_VERSION:
        model.ir_version = IR_VERSION
        raw = model.SerializeToString()
    if tick:
        tick(1)
    return raw
