"""OpenVINO helpers: element types, tensors over caller memory, the raw infer call, devices.

Importing this module without the ``openvino`` package raises UnsupportedError with the
install hint (the runner factory imports the backend lazily, so only OpenVINO users see it).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from ..types import DataType, UnsupportedError

INSTALL_HINT = "the OpenVINO backend needs the openvino package: pip install copyless[openvino]"

try:
    import openvino as ov
except ImportError as _exc:
    raise UnsupportedError(INSTALL_HINT) from _exc

__all__ = [
    "INSTALL_HINT",
    "OV_TYPE",
    "device_name",
    "host_tensor",
    "ov",
    "owned_tensor",
    "raw_infer",
]

#: DataType -> OpenVINO element type.
OV_TYPE: dict[DataType, Any] = {
    DataType.BOOLEAN: ov.Type.boolean,
    DataType.INT8: ov.Type.i8,
    DataType.UINT8: ov.Type.u8,
    DataType.INT16: ov.Type.i16,
    DataType.UINT16: ov.Type.u16,
    DataType.BF16: ov.Type.bf16,
    DataType.FP16: ov.Type.f16,
    DataType.INT32: ov.Type.i32,
    DataType.UINT32: ov.Type.u32,
    DataType.FLOAT32: ov.Type.f32,
    DataType.INT64: ov.Type.i64,
    DataType.UINT64: ov.Type.u64,
}
_VIRTUAL_DEVICES = ("AUTO", "HETERO", "MULTI", "BATCH")


def host_tensor(address: int, data_type: DataType, shape: tuple[int, ...]) -> Any:
    """An ``openvino.Tensor`` over the memory at ``address`` (shared, no copy).

    The tensor does not own the memory: the caller keeps it alive while the tensor is bound
    (the runner's call plan holds the NpuTensors)."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(data_type.to_numpy()).itemsize
    if nbytes == 0 or address == 0:  # nothing to share (an empty tensor may have no address)
        return ov.Tensor(OV_TYPE[data_type], list(shape))
    pointer = ctypes.cast(address, ctypes.POINTER(ctypes.c_uint8))
    # ov.Tensor(array, shape, type) wraps the array's memory and does not keep it alive.
    return ov.Tensor(np.ctypeslib.as_array(pointer, (nbytes,)), list(shape), OV_TYPE[data_type])


def owned_tensor(port: Any) -> Any:
    """An OpenVINO-owned tensor for ``port``: empty, for OpenVINO to resize at each run, or
    of the port's shape where OpenVINO fixed it (its CPU plugin refuses any other size for
    a static port: an output the compiler could not bound that OpenVINO could)."""
    partial = port.get_partial_shape()
    if partial.is_static:
        return ov.Tensor(port.element_type, partial.to_shape())
    rank = partial.rank
    dims = int(rank.get_length()) if rank.is_static else 1
    return ov.Tensor(port.element_type, [0] * dims)


def raw_infer_call(request: Any) -> tuple[Callable[..., object], tuple[Any, ...]]:
    """``(callable, args)`` that infers ``request`` with no Python frame in between where
    this OpenVINO exposes the C++ ``InferRequest.infer`` (the runner's fast path calls it)."""
    try:
        from openvino._pyopenvino import InferRequest as RawRequest
    except ImportError:  # pragma: no cover - module layout of other OpenVINO releases
        return (request.infer, ({}, True))
    return (RawRequest.infer, (request, {}, True, False))


def raw_infer() -> Callable[[Any], object]:
    """``run(request)``: the C++ ``InferRequest.infer`` where this OpenVINO exposes it, which
    skips the Python wrapper's input dispatch; the GIL is released while it infers."""
    try:
        from openvino._pyopenvino import InferRequest as RawRequest
    except ImportError:  # pragma: no cover - module layout of other OpenVINO releases
        return lambda request: request.infer(share_outputs=True)
    infer = RawRequest.infer

    def run(request: Any) -> object:
        # share_outputs=True: the returned dict holds views, not copies, of the outputs.
        return infer(request, {}, True, False)

    return run


def device_name(device: str, available: list[str]) -> str:
    """The OpenVINO device for the runner's ``device`` option; UnsupportedError if absent."""
    if device in ("cuda", "tensorrt"):
        raise UnsupportedError(
            f"device {device!r} is an ONNX Runtime device; RunnerType.OPENVINO takes 'cpu' "
            f"or an OpenVINO device name ({', '.join(available)}, AUTO, ...)"
        )
    name = "CPU" if device == "cpu" else device
    if name.split(":")[0] in _VIRTUAL_DEVICES or name in available:
        return name
    if "." not in name and any(d.split(".")[0] == name for d in available):
        return name
    raise UnsupportedError(
        f"OpenVINO has no device {name!r} here; available: {', '.join(available)}"
    )
