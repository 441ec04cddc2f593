"""An independent, slow numpy reference for layout conversion, used by the layout tests.

Layouts are computed from the index formulas of the table in ``copyless.layout._views``
(``np.indices`` over the physical shape), not with transposes, and element rules straight
from their definitions; nothing here calls copyless's kernels.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from copyless import DataType, MemoryLayout, QuantParameters, RoundingMode

GROUP = {
    MemoryLayout.NHWC4: 4,
    MemoryLayout.NHWC8: 8,
    MemoryLayout.NC4HW4: 4,
    MemoryLayout.NC8HW8: 8,
    MemoryLayout.HCWNC4: 4,
    MemoryLayout.HCWNC8: 8,
    MemoryLayout.HCWNC16: 16,
}
IMAGE_LAYOUTS = [
    MemoryLayout.NCHW,
    MemoryLayout.NHWC,
    MemoryLayout.NHWC4,
    MemoryLayout.NHWC8,
    MemoryLayout.NC4HW4,
    MemoryLayout.NC8HW8,
    MemoryLayout.HCWNC4,
    MemoryLayout.HCWNC8,
    MemoryLayout.HCWNC16,
]
ALL_TYPES = [t for t in DataType if t is not DataType.UNKNOWN]


def physical_shape(layout: MemoryLayout, dims: tuple[int, int, int, int]) -> tuple[int, ...]:
    n, c, h, w = dims
    g = GROUP.get(layout, 1)
    cp = -(-c // g) * g
    return {
        MemoryLayout.NCHW: (n, c, h, w),
        MemoryLayout.NHWC: (n, h, w, c),
        MemoryLayout.NHW: (n, h, w),
        MemoryLayout.NHWC4: (n, h, w, cp),
        MemoryLayout.NHWC8: (n, h, w, cp),
        MemoryLayout.NC4HW4: (n, cp // g, h, w, g),
        MemoryLayout.NC8HW8: (n, cp // g, h, w, g),
    }.get(layout, (h, cp // g, w, n, g))


def logical_index(layout: MemoryLayout, shape: tuple[int, ...]) -> tuple[np.ndarray[Any, Any], ...]:
    """(n, c, h, w) index arrays of every physical position of ``layout``."""
    idx = np.indices(shape)
    if layout is MemoryLayout.NCHW:
        return idx[0], idx[1], idx[2], idx[3]
    if layout is MemoryLayout.NHW:
        return idx[0], np.zeros_like(idx[0]), idx[1], idx[2]
    if layout in (MemoryLayout.NHWC, MemoryLayout.NHWC4, MemoryLayout.NHWC8):
        return idx[0], idx[3], idx[1], idx[2]
    g = shape[-1]
    if layout in (MemoryLayout.NC4HW4, MemoryLayout.NC8HW8):
        return idx[0], idx[1] * g + idx[4], idx[2], idx[3]
    return idx[3], idx[1] * g + idx[4], idx[0], idx[2]  # HCWNCg: [h, c//g, w, n, c%g]


def to_layout(
    logical: np.ndarray[Any, Any], layout: MemoryLayout, pad: Any
) -> np.ndarray[Any, Any]:
    """The physical array of ``layout`` holding the NCHW ``logical`` array, padded with pad."""
    dims = logical.shape
    shape = physical_shape(layout, dims)
    n, c, h, w = logical_index(layout, shape)
    real = c < dims[1]
    out = np.full(shape, pad, dtype=logical.dtype)
    out[real] = logical[n[real], c[real], h[real], w[real]]
    return out


def from_layout(
    physical: np.ndarray[Any, Any], layout: MemoryLayout, dims: tuple[int, int, int, int]
) -> np.ndarray[Any, Any]:
    """The NCHW logical array held by a physical array of ``layout``."""
    n, c, h, w = logical_index(layout, physical.shape)
    real = c < dims[1]
    out = np.zeros(dims, dtype=physical.dtype)
    out[n[real], c[real], h[real], w[real]] = physical[real]
    return out


def np_type(t: DataType) -> Any:
    return ml_dtypes.bfloat16 if t is DataType.BF16 else t.to_numpy()


def quantize(x: np.ndarray[Any, Any], q: QuantParameters, t: DataType) -> np.ndarray[Any, Any]:
    info = np.iinfo(t.to_numpy())
    v = x.astype(np.float32) / np.float32(q.scale)
    v = np.where(np.isnan(v), np.float32(0), v).astype(np.float64)
    v = np.trunc(v) if q.rounding_mode is RoundingMode.ROUND_TOWARD_ZERO else np.rint(v)
    v = np.clip(v, -(2.0**65), 2.0**65)  # +-inf saturate like any value past the range
    if info.bits <= 32:  # exact in float64: |v + zp| < 2**66 rounds only past the clip
        return np.clip(v + q.zero_point, info.min, info.max).astype(t.to_numpy())
    ints = [min(max(int(e) + q.zero_point, int(info.min)), int(info.max)) for e in v.ravel()]
    return np.array(ints, dtype=object).reshape(x.shape).astype(t.to_numpy())


def dequantize(x: np.ndarray[Any, Any], q: QuantParameters, t: DataType) -> np.ndarray[Any, Any]:
    diff = x.astype(np.float64) - q.zero_point
    return (diff.astype(np.float32) * np.float32(q.scale)).astype(np_type(t))


def saturate(x: np.ndarray[Any, Any], t: DataType) -> np.ndarray[Any, Any]:
    if t is DataType.BOOLEAN:
        return x != 0
    info = np.iinfo(t.to_numpy())
    if x.dtype.itemsize <= 4 or x.dtype == np.bool_:  # exact in int64
        return np.clip(x.astype(np.int64), info.min, info.max).astype(t.to_numpy())
    ints = [min(max(int(e), int(info.min)), int(info.max)) for e in x.ravel()]
    return np.array(ints, dtype=object).reshape(x.shape).astype(t.to_numpy())


def convert_elements(
    x: np.ndarray[Any, Any], s: DataType, d: DataType, q: QuantParameters | None
) -> np.ndarray[Any, Any]:
    """Element rule of copyless.layout._plan, from its definitions."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _convert_elements(x, s, d, q)


def _convert_elements(
    x: np.ndarray[Any, Any], s: DataType, d: DataType, q: QuantParameters | None
) -> np.ndarray[Any, Any]:
    if s.is_float and d.is_integer:
        assert q is not None
        return quantize(x, q, d)
    if s.is_integer and d.is_float:
        assert q is not None
        return dequantize(x, q, d)
    if s is DataType.BOOLEAN and d.is_float:
        return x.astype(np.float32).astype(np_type(d))
    if s.is_float and d is DataType.BOOLEAN:
        return x.astype(np.float32) != 0
    if s.is_float and d.is_float:
        return x.astype(np.float32).astype(np_type(d))
    return saturate(x, d)


def sample(t: DataType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """Values of type t that exercise rounding and saturation."""
    if t is DataType.BOOLEAN:
        return rng.random(shape) < 0.5
    if t.is_float:
        v = rng.normal(0, 200, shape).astype(np.float32)
        v.ravel()[::7] = np.round(v.ravel()[::7]) + 0.5  # ties
        return v.astype(np_type(t))
    info = np.iinfo(t.to_numpy())
    return rng.integers(int(info.min), int(info.max), shape, dtype=t.to_numpy(), endpoint=True)


def same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """Equal, NaN equal to NaN, compared on values of the same dtype."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16:
        fa, fb = a.astype(np.float32), b.astype(np.float32)
        return bool(np.array_equal(fa, fb, equal_nan=True))
    return bool(np.array_equal(a, b))
