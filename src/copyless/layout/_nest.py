"""From two views of one logical tensor to the loop nest the C kernel walks.

Each physical dim of a view is an :class:`Axis`: a logical axis, whole (``FULL``) or, for
the blocked layouts NCgHWg / HCWNCg, the channel axis split into ``BLOCK`` (``c // g``) and
``INNER`` (``c % g``). The nest iterates the destination's physical dims in order; the
source's byte offset is linear in every one of them once a whole destination channel axis
facing a split source channel axis is split the same way. Channel padding is the tail of the
``pad`` dim: ``channels - block * group`` positions are real, the rest are filled with the
pad value (destination padded) or never visited (source padded).

The nest is then simplified (size-1 dims dropped, contiguous dims merged), the longest dim
is moved innermost when the destination's innermost dim is short (planar <-> interleaved
conversions), and that inner dim is tiled so a tile of every channel stays in L1.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..types import LayoutError, MemoryLayout, NpuTensorInfo, UnsupportedError
from ._views import GROUP, Logical, logical_of

#: Longest inner row of a tiled nest, in elements (the C kernel's chunk size).
TILE = 1024
_SHORT_INNER = 16
_TILE_MAX_OUTER = 64


class AxisPart(enum.Enum):
    FULL = 0
    BLOCK = 1
    INNER = 2


class PadMode(enum.IntEnum):
    """What happens to channel positions past ``channels`` (values match the C kernel)."""

    NONE = 0
    FILL = 1  # the destination is padded: write the pad value
    SKIP = 2  # the source is padded: those positions do not exist in the destination


@dataclass(frozen=True, slots=True)
class Axis:
    logical: int  # -1 for a size-1 dim with no logical axis
    part: AxisPart = AxisPart.FULL


@dataclass(frozen=True, slots=True)
class Dim:
    extent: int
    src_stride: int  # bytes
    dst_stride: int  # bytes
    role: str = ""  # "", "block" (cb index of the pad dim) or "pad"


@dataclass(frozen=True, slots=True)
class Nest:
    """The loop nest, outer to inner, and its channel padding rule."""

    dims: tuple[Dim, ...]
    pad_mode: PadMode = PadMode.NONE
    group: int = 1
    channels: int = 0

    def index(self, role: str) -> int:
        return next((i for i, d in enumerate(self.dims) if d.role == role), -1)


_IMAGE = {
    MemoryLayout.NCHW: (Axis(0), Axis(1), Axis(2), Axis(3)),
    MemoryLayout.NHWC: (Axis(0), Axis(2), Axis(3), Axis(1)),
    MemoryLayout.NHW: (Axis(0), Axis(2), Axis(3)),
}
_NHWC_G = (Axis(0), Axis(2), Axis(3), Axis(1))
_NCHW_G = (Axis(0), Axis(1, AxisPart.BLOCK), Axis(2), Axis(3), Axis(1, AxisPart.INNER))
_HCWN_G = (Axis(2), Axis(1, AxisPart.BLOCK), Axis(3), Axis(0), Axis(1, AxisPart.INNER))
_NON_IMAGE = frozenset({MemoryLayout.NC, MemoryLayout.NCH})


def byte_strides(info: NpuTensorInfo) -> tuple[int, ...]:
    """The view's byte strides: ``info.strides`` or packed C order."""
    if info.strides is not None:
        if any(s < 0 for s in info.strides):
            raise UnsupportedError(f"{info.describe()}: negative strides are not supported")
        return info.strides
    strides, step = [], info.data_type.itemsize
    for extent in reversed(info.shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def build_nest(src: NpuTensorInfo, dst: NpuTensorInfo) -> Nest:
    """The simplified loop nest converting ``src``'s bytes into ``dst``'s."""
    src_axes, dst_axes, logical = _axes(src, dst)
    nest = _dst_order_nest(src, dst, src_axes, dst_axes, logical)
    return _tile(_move_long_inner(_merge(_drop_unit(nest)), src, dst))


def _fail(src: NpuTensorInfo, dst: NpuTensorInfo, why: str) -> LayoutError:
    return LayoutError(f"cannot convert {src.describe()} -> {dst.describe()}: {why}")


def _axes(
    src: NpuTensorInfo, dst: NpuTensorInfo
) -> tuple[tuple[Axis, ...], tuple[Axis, ...], Logical]:
    """Each view's physical dims as logical axes, and the logical dims they share."""
    same_view = (
        src.memory_layout is dst.memory_layout
        and src.shape == dst.shape
        and src.memory_layout_order == dst.memory_layout_order
    )
    if same_view:
        plain = tuple(Axis(i) for i in range(len(src.shape)))
        return plain, plain, Logical(src.shape, False)
    blocked = [info for info in (src, dst) if info.memory_layout in GROUP]
    if len(blocked) == 2:
        raise _fail(src, dst, "two blocked views; convert each against the CPU view")
    if MemoryLayout.GENERIC in (src.memory_layout, dst.memory_layout):
        if blocked:
            raise _fail(src, dst, "GENERIC converts only against a non-blocked (CPU) view")
        src_log, dst_log = _generic_logical(src), _generic_logical(dst)
        if src_log.dims != dst_log.dims:
            raise _fail(src, dst, f"logical dims {src_log.dims} != {dst_log.dims}")
        return _generic_axes(src), _generic_axes(dst), src_log
    if blocked:
        plain_view = dst if blocked[0] is src else src
        logical = _image_logical(src, dst, plain_view)
        _check_blocked_shape(src, dst, blocked[0], logical)
    else:
        logical = _image_logical(src, dst, src)
        if _image_logical(src, dst, dst) != logical:
            raise _fail(src, dst, "the views have different logical dims")
    return _image_axes(src), _image_axes(dst), logical


def _generic_logical(info: NpuTensorInfo) -> Logical:
    if info.memory_layout is MemoryLayout.GENERIC and info.memory_layout_order:
        if sorted(info.memory_layout_order) != list(range(len(info.shape))):
            raise LayoutError(
                f"{info.describe()}: memory_layout_order {list(info.memory_layout_order)} "
                "is not a permutation of its dims"
            )
        return logical_of(info)
    return Logical(info.shape, False)


def _generic_axes(info: NpuTensorInfo) -> tuple[Axis, ...]:
    if info.memory_layout is MemoryLayout.GENERIC and info.memory_layout_order:
        return tuple(Axis(p) for p in info.memory_layout_order)
    return tuple(Axis(i) for i in range(len(info.shape)))


def _image_logical(src: NpuTensorInfo, dst: NpuTensorInfo, view: NpuTensorInfo) -> Logical:
    layout = view.memory_layout
    if layout in _IMAGE:
        logical = logical_of(view)
        if not logical.image:
            raise _fail(src, dst, f"{layout.name} needs rank {len(_IMAGE[layout])}")
        return logical
    if layout in _NON_IMAGE:
        if len(view.shape) != len(layout.name):
            raise _fail(src, dst, f"{layout.name} needs rank {len(layout.name)}")
        return Logical(view.shape, False)
    raise UnsupportedError(
        f"cannot convert {src.describe()} -> {dst.describe()}: "
        f"no conversion for {layout.name} views"
    )


def _check_blocked_shape(
    src: NpuTensorInfo, dst: NpuTensorInfo, blocked: NpuTensorInfo, logical: Logical
) -> None:
    if not logical.image:
        raise _fail(src, dst, "a blocked view needs a 4-D NCHW/NHWC (or NHW) partner")
    n, c, h, w = logical.dims
    g = GROUP[blocked.memory_layout]
    nb = -(-c // g)
    expected = {
        MemoryLayout.NHWC4: (n, h, w, nb * g),
        MemoryLayout.NHWC8: (n, h, w, nb * g),
        MemoryLayout.NC4HW4: (n, nb, h, w, g),
        MemoryLayout.NC8HW8: (n, nb, h, w, g),
    }.get(blocked.memory_layout, (h, nb, w, n, g))
    if blocked.shape != expected:
        raise _fail(src, dst, f"the blocked view's shape should be {list(expected)}")


def _image_axes(info: NpuTensorInfo) -> tuple[Axis, ...]:
    layout = info.memory_layout
    if layout in _IMAGE:
        return _IMAGE[layout]
    if layout in (MemoryLayout.NHWC4, MemoryLayout.NHWC8):
        return _NHWC_G
    if layout in (MemoryLayout.NC4HW4, MemoryLayout.NC8HW8):
        return _NCHW_G
    if layout in GROUP:
        return _HCWN_G
    return tuple(Axis(i) for i in range(len(info.shape)))


def _dst_order_nest(
    src: NpuTensorInfo,
    dst: NpuTensorInfo,
    src_axes: tuple[Axis, ...],
    dst_axes: tuple[Axis, ...],
    logical: Logical,
) -> Nest:
    s_strides, d_strides = byte_strides(src), byte_strides(dst)
    full: dict[int, int] = {}
    split: dict[AxisPart, int] = {}
    for axis, stride in zip(src_axes, s_strides, strict=True):
        if axis.part is AxisPart.FULL:
            full[axis.logical] = stride
        else:
            split[axis.part] = stride
    channels = logical.dims[1] if logical.image else 0
    group = GROUP.get(src.memory_layout) or GROUP.get(dst.memory_layout) or 1
    pad_mode = PadMode.NONE
    dims: list[Dim] = []
    for axis, extent, d_stride in zip(dst_axes, dst.shape, d_strides, strict=True):
        if axis.part is AxisPart.BLOCK:
            dims.append(Dim(extent, group * full.get(1, 0), d_stride, "block"))
        elif axis.part is AxisPart.INNER:
            dims.append(Dim(extent, full.get(1, 0), d_stride, "pad"))
            pad_mode = PadMode.FILL
        elif axis.logical in full or not split or axis.logical != 1:
            role = ""
            if logical.image and axis.logical == 1 and extent > channels:
                role, pad_mode, group = "pad", PadMode.FILL, extent  # NHWCg
            dims.append(Dim(extent, full.get(axis.logical, 0), d_stride, role))
        else:  # a whole channel axis facing a split source: split it the same way
            blocks = -(-extent // group)
            dims.append(Dim(blocks, split[AxisPart.BLOCK], group * d_stride, "block"))
            dims.append(Dim(group, split[AxisPart.INNER], d_stride, "pad"))
            pad_mode = PadMode.SKIP
    return Nest(tuple(dims), pad_mode, group, channels)


def _drop_unit(nest: Nest) -> Nest:
    """Size-1 dims change nothing (a size-1 block dim means the block index is always 0)."""
    dims = tuple(d for d in nest.dims if d.extent != 1 or d.role == "pad")
    return Nest(dims or (Dim(1, 0, 0),), nest.pad_mode, nest.group, nest.channels)


def _merge(nest: Nest) -> Nest:
    """Merge an outer dim into the next one when both views step through them as one."""
    dims: list[Dim] = []
    for dim in reversed(nest.dims):
        if dims and not dim.role and not dims[0].role:
            inner = dims[0]
            if (
                dim.src_stride == inner.src_stride * inner.extent
                and dim.dst_stride == inner.dst_stride * inner.extent
            ):
                dims[0] = Dim(dim.extent * inner.extent, inner.src_stride, inner.dst_stride)
                continue
        dims.insert(0, dim)
    return Nest(tuple(dims), nest.pad_mode, nest.group, nest.channels)


def _move_long_inner(nest: Nest, src: NpuTensorInfo, dst: NpuTensorInfo) -> Nest:
    """With a short innermost dim (e.g. 3-4 channels), make the longest dim innermost."""
    dims = list(nest.dims)
    if len(dims) < 2 or dims[-1].extent >= _SHORT_INNER:
        return nest
    itemsize = src.data_type.itemsize
    candidates = [i for i, d in enumerate(dims[:-1]) if d.role != "block"]
    if not candidates:
        return nest
    best = max(candidates, key=lambda i: (dims[i].src_stride == itemsize, dims[i].extent))
    if dims[best].extent <= dims[-1].extent:
        return nest
    dims.append(dims.pop(best))
    return Nest(tuple(dims), nest.pad_mode, nest.group, nest.channels)


def _tile(nest: Nest) -> Nest:
    """Split a long inner dim under a short one, so each tile of all rows stays in cache."""
    dims = list(nest.dims)
    if len(dims) < 2 or dims[-1].role or dims[-1].extent <= 2 * TILE:
        return nest
    if dims[-2].extent > _TILE_MAX_OUTER:
        return nest
    inner = dims[-1]
    size = next((t for t in range(TILE, TILE // 8, -1) if inner.extent % t == 0), 0)
    if not size:
        return nest
    outer = Dim(inner.extent // size, inner.src_stride * size, inner.dst_stride * size)
    tiled = [*dims[:-2], outer, dims[-2], Dim(size, inner.src_stride, inner.dst_stride)]
    return Nest(tuple(tiled), nest.pad_mode, nest.group, nest.channels)
