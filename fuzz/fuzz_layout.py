"""Coverage-guided fuzzing of the layout conversion kernel (``layout/_kernels.c``) with atheris.

Two modes (first byte of the input):

* ``API`` (even): two views of one logical tensor (every layout the CPU and HW sides have:
  NCHW, NHWC, NHW, NC, NCH, GENERIC, NHWC4/8, NC4HW4/NC8HW8, HCWNC4/8/16), every pair of
  dtypes, random shapes with zero- and one-sized dims, random byte strides (aligned or not,
  overlapping on the source side), quantisation parameters at the extremes (scale 0, tiny,
  huge, NaN, inf, negative; zero points at and past the type's limits), the views placed at
  the very end of their allocations (ASan sees a one-byte overrun), buffers one byte short,
  overlapping source and destination. Contract: ``plan_for`` raises a copyless error or
  gives a plan; bad parameters are refused in Python (the C ``Plan`` constructor is never
  called with them, and never refuses what Python accepted); ``run`` raises LayoutError
  or writes exactly the numpy reference (``tests/layout/layout_reference.py``) into the
  destination's elements and not one byte elsewhere.
* ``RAW`` (odd): random parameters straight into ``_kernels.Plan`` and ``run`` on small
  buffers. Contract: the C code refuses what does not fit its buffers (ValueError,
  TypeError, OverflowError) or runs without touching memory outside them.

Run through ``fuzz/sanitize.py`` (instrumented kernels, ASan runtime preloaded)::

    .venv/bin/python fuzz/sanitize.py fuzz layout -max_total_time=3600
    .venv/bin/python fuzz/sanitize.py fuzz layout fuzz/findings/layout-crash-...  # replay
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "layout"))

import copyless.layout._plan as plan_module
from copyless import (
    CopylessError,
    DataType,
    LayoutError,
    MemoryLayout,
    NpuTensorInfo,
    QuantParameters,
    RoundingMode,
    TensorDirection,
    TensorError,
    TensorType,
)
from copyless.layout import _kernels, hw_info_for, plan_for

ML = MemoryLayout
TYPES = [t for t in DataType if t is not DataType.UNKNOWN]
CPU_LAYOUTS = [ML.NCHW, ML.NHWC, ML.NCHW, ML.NHWC, ML.NHW, ML.NC, ML.NCH, ML.GENERIC]
HW_LAYOUTS = [
    ML.NCHW, ML.NHWC, ML.NHW, ML.NHWC4, ML.NHWC8, ML.NC4HW4, ML.NC8HW8, ML.HCWNC4, ML.HCWNC8,
    ML.HCWNC16, ML.GENERIC, ML.NC, ML.NCH, ML.NHC, ML.NWC, ML.UNKNOWN,
]  # fmt: skip
IMAGE_HW = [ML.NCHW, ML.NHWC, ML.NHWC4, ML.NHWC8, ML.NC4HW4, ML.NC8HW8, ML.HCWNC4, ML.HCWNC8,
            ML.HCWNC16, ML.GENERIC]  # fmt: skip
FITTING = {ML.NCHW: IMAGE_HW, ML.NHWC: IMAGE_HW, ML.NHW: [*IMAGE_HW, ML.NHW],
           ML.NC: [ML.NC, ML.GENERIC], ML.NCH: [ML.NCH, ML.GENERIC]}  # fmt: skip
ZERO_POINTS = [0, -128, 127, 255, 256, -129, 65535, -32768, 32767, 2**31 - 1, -(2**31),
               2**32 - 1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64]  # fmt: skip
SCALES = [1.0, 0.5, 1 / 255, 0.1, 3.0, 1e-45, 1e-40, 1e-30, 1e30, 3.4e38, 1e300, 1e-300, 0.0,
          -1.0, math.nan, math.inf, -math.inf, 2.0**-126, 2.0**127]  # fmt: skip
MAX_ELEMENTS = 2048
SENTINEL = 0xA5


class Guard:
    """Stands in for ``_kernels`` inside copyless.layout._plan: counts C constructions."""

    def __init__(self) -> None:
        self.built = 0

    def Plan(self, *args: Any) -> Any:
        self.built += 1
        try:
            return _kernels.Plan(*args)
        except Exception as exc:
            raise AssertionError(f"C refused a plan Python accepted: {exc!r} {args}") from exc


GUARD = Guard()
plan_module._kernels = GUARD  # type: ignore[assignment]


def ints(fdp: Any, n: int, lo: int, hi: int) -> list[int]:
    return [fdp.ConsumeIntInRange(lo, hi) for _ in range(n)]


def extent(fdp: Any) -> int:
    return [0, 1, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33][fdp.ConsumeIntInRange(0, 12)]


def cpu_info(fdp: Any, dtype: DataType) -> NpuTensorInfo:
    layout = fdp.PickValueInList(CPU_LAYOUTS)
    rank = {ML.NC: 2, ML.NCH: 3, ML.NHW: 3}.get(layout, 4)
    if layout is ML.GENERIC:
        rank = fdp.ConsumeIntInRange(1, 5)
    shape = tuple(extent(fdp) for _ in range(rank))
    return NpuTensorInfo("x", dtype, TensorDirection.INPUT, TensorType.CPU, layout, shape)


def hw_info(fdp: Any, cpu: NpuTensorInfo, dtype: DataType) -> NpuTensorInfo:
    layout = fdp.PickValueInList(HW_LAYOUTS)
    if fdp.ConsumeIntInRange(0, 3):  # mostly a layout that fits the CPU view
        layout = fdp.PickValueInList(FITTING.get(cpu.memory_layout, [ML.GENERIC]))
    order = list(range(len(cpu.shape)))
    if layout is ML.GENERIC:
        for i in range(len(order) - 1, 0, -1):  # a permutation from the fuzzer's bytes
            j = fdp.ConsumeIntInRange(0, i)
            order[i], order[j] = order[j], order[i]
        if fdp.ConsumeIntInRange(0, 15) == 0:
            order = ints(fdp, len(order), -1, len(order))  # not always a permutation
    try:
        hw = hw_info_for(cpu, layout, dtype, tuple(order))
    except CopylessError:
        hw = NpuTensorInfo("x", dtype, cpu.direction, TensorType.HW, layout, cpu.shape)
    if fdp.ConsumeIntInRange(0, 7) == 0:  # a shape that is not the CPU view's
        shape = list(hw.shape)
        if shape:
            shape[fdp.ConsumeIntInRange(0, len(shape) - 1)] += fdp.ConsumeIntInRange(-1, 2)
        hw = dataclasses.replace(hw, shape=tuple(max(0, d) for d in shape))
    return hw


def with_strides(fdp: Any, info: NpuTensorInfo, dst: bool) -> NpuTensorInfo:
    """Packed (most inputs), gapped, unaligned or (source only) overlapping byte strides."""
    mode = fdp.ConsumeIntInRange(0, 7)
    if mode < 4:
        return info
    strides, step = [], info.data_type.itemsize
    for d in reversed(info.shape):
        gap = fdp.ConsumeIntInRange(0, 5) if mode >= 5 else 0
        strides.append(step + gap)
        step = (step + gap) * max(d, 1)
    strides.reverse()
    if mode == 7 and not dst and strides:  # the source may alias its own elements
        strides[fdp.ConsumeIntInRange(0, len(strides) - 1)] = fdp.ConsumeIntInRange(0, 3)
    if mode == 6 and fdp.ConsumeIntInRange(0, 7) == 0 and strides:
        strides[0] = -strides[0]
    try:
        return dataclasses.replace(info, strides=tuple(strides))
    except TensorError:
        # NpuTensorInfo refuses 0 / negative steps and overlapping OUTPUT elements itself.
        if all(s >= 1 for s in strides) and info.direction is not TensorDirection.OUTPUT:
            raise
        return info


def quant(fdp: Any, src: DataType, dst: DataType) -> QuantParameters | None:
    """Mostly what the pair needs (quant params iff float <-> integer), sometimes not."""
    mixed = (src.is_float and dst.is_integer) or (src.is_integer and dst.is_float)
    if mixed == (fdp.ConsumeIntInRange(0, 15) == 0):
        return None
    choice = fdp.ConsumeIntInRange(0, 7)
    scale = fdp.PickValueInList(SCALES) if choice < 6 else fdp.ConsumeRegularFloat()
    if choice < 3:
        scale = fdp.PickValueInList(SCALES[:5])
    zp = fdp.ConsumeIntInRange(-300, 300)
    if fdp.ConsumeBool():
        zp = fdp.PickValueInList(ZERO_POINTS)
    mode = fdp.PickValueInList(list(RoundingMode))
    return QuantParameters(scale, zp, mode)  # may raise: refused in Python


def fill_values(fdp: Any, arr: np.ndarray[Any, Any], dtype: DataType) -> None:
    import layout_reference as ref

    rng = np.random.default_rng(fdp.ConsumeIntInRange(0, 2**16))
    arr[...] = ref.sample(dtype, arr.shape, rng)
    if dtype.is_float and arr.size:
        specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 3.4e38, 65504.0, 65520.0, 255.5,
                    -128.5, 2.5, 1e10]  # fmt: skip
        flat = arr.reshape(-1)
        for _ in range(fdp.ConsumeIntInRange(0, 4)):
            flat[fdp.ConsumeIntInRange(0, flat.size - 1)] = fdp.PickValueInList(specials)


def element_offsets(info: NpuTensorInfo) -> np.ndarray[Any, Any]:
    from copyless.layout._nest import byte_strides

    strides = byte_strides(info)
    if not info.shape or 0 in info.shape:
        return np.zeros(0, np.int64)
    grids = np.indices(info.shape).reshape(len(info.shape), -1)
    return np.asarray(strides, np.int64) @ grids


def physical(buf: np.ndarray[Any, Any], info: NpuTensorInfo) -> np.ndarray[Any, Any]:
    """The view's elements as an array (a strided view of ``buf``, no copy)."""
    from copyless.layout._nest import byte_strides

    dtype = info.numpy_dtype
    if 0 in info.shape:
        return np.zeros(info.shape, dtype)
    base = np.frombuffer(buf, dtype=np.uint8)
    typed = np.ndarray(info.shape, dtype, buffer=base, offset=0, strides=byte_strides(info))
    return as_strided(typed, info.shape, byte_strides(info))


def to_logical(arr: np.ndarray[Any, Any], info: NpuTensorInfo, kind: str, dims: Any) -> Any:
    """The logical tensor held by a view's elements (``kind`` from :func:`pair_kind`)."""
    import layout_reference as ref

    if kind == "image":
        return ref.from_layout(np.array(arr), info.memory_layout, dims)
    if kind == "generic" and info.memory_layout is ML.GENERIC and info.memory_layout_order:
        return np.transpose(arr, np.argsort(info.memory_layout_order))
    return np.array(arr)


def from_logical(logical: np.ndarray[Any, Any], info: NpuTensorInfo, kind: str, pad: Any) -> Any:
    """The elements of ``info``'s view of ``logical``, channel padding = ``pad``."""
    import layout_reference as ref

    if kind == "image":
        return ref.to_layout(logical, info.memory_layout, pad).reshape(info.shape)
    if kind == "generic" and info.memory_layout is ML.GENERIC and info.memory_layout_order:
        return np.transpose(logical, info.memory_layout_order)
    return logical.reshape(info.shape)


def pair_kind(src: NpuTensorInfo, dst: NpuTensorInfo) -> tuple[str, Any]:
    """How the two views map onto one logical tensor (the rules of copyless.layout._nest)."""
    import layout_reference as ref

    from copyless.layout._views import GROUP, logical_of

    if (src.memory_layout, src.shape, src.memory_layout_order) == (
        dst.memory_layout, dst.shape, dst.memory_layout_order
    ):
        return "same", None
    if ML.GENERIC in (src.memory_layout, dst.memory_layout):
        return "generic", None
    image = [*ref.IMAGE_LAYOUTS, ML.NHW]
    if src.memory_layout in image and dst.memory_layout in image:
        plain = dst if src.memory_layout in GROUP else src
        return "image", logical_of(plain).dims
    return "same", None


def expected_refusal(src: NpuTensorInfo, dst: NpuTensorInfo, q: QuantParameters | None) -> str:
    """Why copyless must refuse this pair at plan time ("" when it need not)."""
    s, d = src.data_type, dst.data_type
    mixed = (s.is_float and d.is_integer) or (s.is_integer and d.is_float)
    if mixed != (q is not None):
        return "quant given for a non-mixed pair, or missing for a mixed one"
    if q is not None:
        info = np.iinfo((d if d.is_integer else s).to_numpy())
        if not info.min <= q.zero_point <= info.max:
            return "zero point outside the integer type"
        if not 0.0 < float(np.float32(q.scale)) < math.inf:
            return "scale is 0 or inf as float32"
        if not -(2**63) <= q.zero_point < 2**63:
            return "zero point outside int64"
    for info in (src, dst):
        if info.strides is not None and any(st < 0 for st in info.strides):
            return "negative stride"
    return ""


def check_api(fdp: Any) -> None:
    s_type, d_type = fdp.PickValueInList(TYPES), fdp.PickValueInList(TYPES)
    cpu = cpu_info(fdp, s_type)
    hw = hw_info(fdp, cpu, d_type)
    src, dst = cpu, hw
    if fdp.ConsumeBool():  # HW -> CPU
        src = dataclasses.replace(hw, data_type=s_type)
        dst = dataclasses.replace(cpu, data_type=d_type)
    if max(math.prod(src.shape), math.prod(dst.shape)) > MAX_ELEMENTS:
        return
    src, dst = with_strides(fdp, src, False), with_strides(fdp, dst, True)
    try:
        q = quant(fdp, src.data_type, dst.data_type)
    except LayoutError:
        return  # QuantParameters refused a non-finite or non-positive scale
    must_refuse = expected_refusal(src, dst, q)
    built = GUARD.built
    try:
        plan = plan_for(src, dst, q)
    except CopylessError as exc:
        if GUARD.built != built:
            raise AssertionError(f"refused after the C plan was built: {exc}") from exc
        return
    if must_refuse:
        raise AssertionError(f"accepted ({must_refuse}): {src} -> {dst} {q}")
    run_and_compare(fdp, plan, src, dst, q)


def run_and_compare(fdp: Any, plan: Any, src: NpuTensorInfo, dst: NpuTensorInfo, q: Any) -> None:
    import layout_reference as ref

    s_need, d_need = src.size_in_bytes, dst.size_in_bytes
    s_short = int(s_need > 0 and fdp.ConsumeIntInRange(0, 15) == 0)
    d_short = int(d_need > 0 and fdp.ConsumeIntInRange(0, 15) == 0)
    s_off, d_off = fdp.ConsumeIntInRange(0, 7), fdp.ConsumeIntInRange(0, 7)
    overlap = fdp.ConsumeIntInRange(0, 15) == 0
    s_mem = np.empty(s_off + s_need - s_short, np.uint8)
    src_buf = s_mem[s_off:]
    src_arr = None
    if not s_short:
        values = np.empty(src.shape, src.numpy_dtype)
        fill_values(fdp, values, src.data_type)
        src_buf[:] = 0
        src_arr = physical(src_buf, src)
        src_arr[...] = values  # an aliasing (stride 0) source keeps the last write
    d_mem = np.full(d_off + d_need - d_short, SENTINEL, np.uint8)
    dst_buf = d_mem[d_off:]
    if overlap and len(src_buf) and len(dst_buf):
        dst_buf = s_mem[s_off:]  # starts where the source starts
    try:
        plan.run(src_buf, dst_buf)
    except LayoutError as exc:
        if s_short or d_short or overlap:
            return
        raise AssertionError(f"refused a valid run: {exc}") from exc
    if s_short or d_short:
        raise AssertionError("ran on a buffer one byte short")
    if overlap and math.prod(src.shape) > 0 and dst_buf.base is s_mem:
        raise AssertionError("ran on overlapping source and destination")
    if overlap:
        return
    assert src_arr is not None
    kind, dims = pair_kind(src, dst)
    logical = to_logical(src_arr, src, kind, dims)
    converted = ref.convert_elements(logical, src.data_type, dst.data_type, q)
    pad = np.array(plan.rule.pad_value).astype(converted.dtype)
    expected = from_logical(converted, dst, kind, pad)
    actual = physical(dst_buf, dst)
    if not ref.same(np.ascontiguousarray(expected), np.array(actual)):
        got, want = np.array(actual).reshape(-1), np.ascontiguousarray(expected).reshape(-1)
        bad = np.flatnonzero(got.astype(np.float64) != want.astype(np.float64))[:4]
        raise AssertionError(f"wrong values {src} -> {dst} {q}: at {bad.tolist()} "
                             f"got {got[bad].tolist()} want {want[bad].tolist()}")  # fmt: skip
    touched = np.zeros(len(dst_buf), bool)
    offsets = element_offsets(dst)
    for b in range(dst.data_type.itemsize):
        touched[offsets + b] = True
    if not np.all(dst_buf[~touched] == SENTINEL) or not np.all(d_mem[:d_off] == SENTINEL):
        raise AssertionError(f"wrote outside the destination's elements {src} -> {dst}")


ITEMSIZE = [1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8]  # by C type code (_TYPE_CODE's values)


def small(fdp: Any, lo: int, hi: int, wild: list[int]) -> int:
    """Mostly in [lo, hi]; one time in eight one of ``wild`` (past what C accepts)."""
    if fdp.ConsumeIntInRange(0, 7) == 0 or hi < lo:
        return int(fdp.PickValueInList(wild))
    return int(fdp.ConsumeIntInRange(lo, hi))


def raw_op(stype: int, dtype: int) -> int:
    """The C op code Python would pick for two C type codes (plan.element_rule)."""
    code = {v: k for k, v in plan_module._TYPE_CODE.items()}
    s, d = code.get(stype), code.get(dtype)
    if s is None or d is None:
        return 0
    if s is d:
        return 0
    if s.is_float and d.is_float:
        return 1
    if s.is_float:
        return 2 if d.is_integer else 5
    return 3 if d.is_float else 4


def check_raw(fdp: Any) -> None:
    ndim = small(fdp, 1, 6, [0, 12, 13, -1])
    shape = [small(fdp, 0, 9, [-1, 2**31, 2**62, 2**63 - 1]) for _ in range(max(ndim, 0))]
    if 0 < ndim <= 13 and math.prod(max(d, 0) for d in shape) > 20000 and 0 not in shape:
        return
    wild = [0, 2**31, 2**62, 2**63 - 1, -1, 3, 5]
    sstr = [small(fdp, 0, 64, wild) for _ in range(max(ndim, 0))]
    dstr = [small(fdp, 0, 64, wild) for _ in range(max(ndim, 0))]
    stype, dtype = small(fdp, 0, 11, [-1, 12]), small(fdp, 0, 11, [-1, 12])
    pad_len = ITEMSIZE[dtype] if 0 <= dtype < 12 else 1
    cb_dim = small(fdp, -1, ndim - 2, [-2, ndim, 13])
    pad_dim = small(fdp, cb_dim + 1, ndim - 1, [-1, -2, ndim, 13])
    pad_mode = small(fdp, 1, 2, [-1, 3]) if pad_dim >= 0 else small(fdp, 0, 0, [1, 2])
    args = (
        shape, sstr, dstr, stype, dtype, small(fdp, *[raw_op(stype, dtype)] * 2, [-1, 6, 0, 4]),
        fdp.PickValueInList(SCALES), small(fdp, -300, 300, [-(2**63), 2**63 - 1]),
        fdp.ConsumeBool(), pad_dim, cb_dim, pad_mode,
        small(fdp, 1, 17, [0, -1, 2**62]), small(fdp, 0, 40, [-1, 2**62]),
        bytes(small(fdp, pad_len, pad_len, [0, 3, 9])), small(fdp, 0, 4096, [-1, 2**62]),
        small(fdp, 0, 4096, [-1, 2**62]),
    )  # fmt: skip
    try:
        kernel = _kernels.Plan(*args)
    except (ValueError, TypeError, OverflowError):
        return
    sizes = [min(max(n, 0), 4097) for n in (args[15], args[15] + 1, args[16], args[16] + 1)]
    src = np.empty(small(fdp, 0, 4096, sizes[:2]), np.uint8)
    dst = np.empty(small(fdp, 0, 4096, sizes[2:]), np.uint8)
    src[:] = 7
    try:
        kernel.run(src, dst)
    except (ValueError, TypeError, BufferError):
        return


def check(data: bytes) -> None:
    import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]

    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeIntInRange(0, 3) == 3:
        check_raw(fdp)
    else:
        check_api(fdp)


if __name__ == "__main__":
    from harness import main

    import copyless.layout._nest
    import copyless.layout._views

    main(check, [plan_module, copyless.layout._nest, copyless.layout._views], check_api,
         run_and_compare, check_raw)  # fmt: skip
