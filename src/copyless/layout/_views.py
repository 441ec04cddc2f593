"""Views of one logical tensor: the HW shape of each layout, and the index maps between them.

A 4-D logical tensor has dims ``(N, C, H, W)``. Each layout stores it as:

==========  =============================  =================================
layout      physical shape                 element (n, c, h, w) at
==========  =============================  =================================
NCHW        [N, C, H, W]                   [n, c, h, w]
NHWC        [N, H, W, C]                   [n, h, w, c]
NHWCg       [N, H, W, ceil(C/g)*g]         [n, h, w, c]          (g = 4, 8)
NCgHWg      [N, ceil(C/g), H, W, g]        [n, c//g, h, w, c%g]  (g = 4, 8)
HCWNCg      [H, ceil(C/g), W, N, g]        [h, c//g, w, n, c%g]  (g = 4, 8, 16)
NHW         [N, H, W]                      (C must be 1)
GENERIC     [dims[p] for p in order]       the CPU dims permuted by memory_layout_order
==========  =============================  =================================

Channel padding up to the group size is zero (the zero point for quantized integer views).
2-D (NC) and 3-D (NCH) CPU tensors keep their own shape in NC/NCH/GENERIC views.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..types import (
    DataType,
    LayoutError,
    MemoryLayout,
    NpuTensorInfo,
    TensorType,
    UnsupportedError,
)

#: Blocked layouts and their channel group size.
GROUP: dict[MemoryLayout, int] = {
    MemoryLayout.NHWC4: 4,
    MemoryLayout.NHWC8: 8,
    MemoryLayout.NC4HW4: 4,
    MemoryLayout.NC8HW8: 8,
    MemoryLayout.HCWNC4: 4,
    MemoryLayout.HCWNC8: 8,
    MemoryLayout.HCWNC16: 16,
}

_FOUR_D = frozenset(GROUP) | {MemoryLayout.NCHW, MemoryLayout.NHWC}


@dataclass(frozen=True, slots=True)
class Logical:
    """The logical dims of a view: ``(N, C, H, W)`` for image tensors, else the CPU shape."""

    dims: tuple[int, ...]
    image: bool  # True when dims are (N, C, H, W) and layouts above apply


def logical_of(info: NpuTensorInfo) -> Logical:
    """The logical tensor that ``info`` is a view of. Raises LayoutError if it cannot tell."""
    layout, shape = info.memory_layout, info.shape
    try:
        if layout is MemoryLayout.NCHW and len(shape) == 4:
            return Logical(shape, True)
        if layout is MemoryLayout.NHWC and len(shape) == 4:
            n, h, w, c = shape
            return Logical((n, c, h, w), True)
        if layout is MemoryLayout.NHW and len(shape) == 3:
            n, h, w = shape
            return Logical((n, 1, h, w), True)
    except ValueError:
        pass
    if layout in GROUP:
        raise LayoutError(
            f"{info.describe()}: a blocked view does not tell its channel count on its own; "
            "convert against the CPU view"
        )
    if layout is MemoryLayout.GENERIC and info.memory_layout_order:
        order = info.memory_layout_order
        dims = [0] * len(order)
        for physical, logical in enumerate(order):
            dims[logical] = shape[physical]
        return Logical(tuple(dims), False)
    return Logical(shape, False)


def hw_info_for(
    cpu_info: NpuTensorInfo,
    memory_layout: MemoryLayout,
    data_type: DataType,
    memory_layout_order: tuple[int, ...] = (),
) -> NpuTensorInfo:
    """The HW view of ``cpu_info`` in ``memory_layout`` / ``data_type`` (shape per the table).

    Raises :class:`LayoutError` when the CPU view's rank does not fit the layout and
    :class:`UnsupportedError` for layouts copyless does not convert (NC, NCH, NHC, NWC
    on image tensors, UNKNOWN).
    """
    shape = _hw_shape(cpu_info, memory_layout, tuple(memory_layout_order))
    return NpuTensorInfo(
        cpu_info.name,
        data_type,
        cpu_info.direction,
        TensorType.HW,
        memory_layout,
        shape,
        tuple(memory_layout_order) if memory_layout is MemoryLayout.GENERIC else (),
    )


def _hw_shape(
    cpu_info: NpuTensorInfo, layout: MemoryLayout, order: tuple[int, ...]
) -> tuple[int, ...]:
    logical = logical_of(cpu_info)
    dims = logical.dims
    if layout is MemoryLayout.GENERIC:
        if sorted(order) != list(range(len(cpu_info.shape))):
            raise LayoutError(
                f"{cpu_info.describe()}: memory_layout_order {list(order)} is not a "
                f"permutation of {len(cpu_info.shape)} dims"
            )
        return tuple(cpu_info.shape[p] for p in order)
    if layout in (MemoryLayout.NC, MemoryLayout.NCH) and not logical.image:
        if len(dims) != (2 if layout is MemoryLayout.NC else 3):
            raise LayoutError(f"{cpu_info.describe()}: {layout.name} needs rank {len(layout.name)}")
        return dims
    if layout not in _FOUR_D and layout is not MemoryLayout.NHW:
        raise UnsupportedError(f"{cpu_info.describe()}: no conversion to {layout.name}")
    if not logical.image:
        raise LayoutError(
            f"{cpu_info.describe()}: {layout.name} needs a 4-D NCHW/NHWC (or 3-D NHW) CPU view"
        )
    n, c, h, w = dims
    if layout is MemoryLayout.NCHW:
        return (n, c, h, w)
    if layout is MemoryLayout.NHWC:
        return (n, h, w, c)
    if layout is MemoryLayout.NHW:
        if c != 1:
            raise LayoutError(f"{cpu_info.describe()}: NHW needs C == 1, not {c}")
        return (n, h, w)
    g = GROUP[layout]
    blocks = -(-c // g)
    if layout in (MemoryLayout.NHWC4, MemoryLayout.NHWC8):
        return (n, h, w, blocks * g)
    if layout in (MemoryLayout.NC4HW4, MemoryLayout.NC8HW8):
        return (n, blocks, h, w, g)
    return (h, blocks, w, n, g)
