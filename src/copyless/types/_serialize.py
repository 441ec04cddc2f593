"""JSON-able forms of the metadata, shared by the model format and the IPC wire format.

Enums travel by member name, so the encoding survives reordering of enum values.
"""

from __future__ import annotations

from typing import Any

from ._enums import DataType, MemoryLayout, RoundingMode, TensorDirection, TensorType
from ._info import NpuTensorInfo, QuantParameters


def info_to_dict(info: NpuTensorInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "data_type": info.data_type.name,
        "direction": info.direction.name,
        "tensor_type": info.tensor_type.name,
        "memory_layout": info.memory_layout.name,
        "shape": list(info.shape),
        "memory_layout_order": list(info.memory_layout_order),
        "strides": None if info.strides is None else list(info.strides),
    }


def info_from_dict(data: dict[str, Any]) -> NpuTensorInfo:
    """Inverse of :func:`info_to_dict`. Raises ``ValueError``/``KeyError``/``TypeError``
    on malformed input (callers wrap these into their own error)."""
    strides = data.get("strides")
    return NpuTensorInfo(
        str(data["name"]),
        DataType[data["data_type"]],
        TensorDirection[data["direction"]],
        TensorType[data["tensor_type"]],
        MemoryLayout[data["memory_layout"]],
        tuple(_ints(data["shape"])),
        tuple(_ints(data.get("memory_layout_order", []))),
        None if strides is None else tuple(_ints(strides)),
    )


def quant_to_dict(quant: QuantParameters | None) -> dict[str, Any] | None:
    if quant is None:
        return None
    return {
        "scale": quant.scale,
        "zero_point": quant.zero_point,
        "rounding_mode": quant.rounding_mode.name,
    }


def quant_from_dict(data: dict[str, Any] | None) -> QuantParameters | None:
    if data is None:
        return None
    return QuantParameters(
        float(data["scale"]),
        int(data["zero_point"]),
        RoundingMode[data.get("rounding_mode", "ROUND_TO_NEAREST_EVEN")],
    )


def _ints(values: Any) -> list[int]:
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        raise TypeError(f"expected a list of ints, got {values!r}")
    return [int(v) for v in values]
