"""What the C conversion kernel (layout/_kernels.c) checks on its own, and the regressions
fuzz/fuzz_layout.py found: each test fails on the code before its fix (run under
``fuzz/sanitize.py test`` the memory ones fail as ASan/UBSan reports)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from layout_reference import quantize, to_layout

from copyless import (
    DataType,
    LayoutError,
    MemoryLayout,
    NpuTensorInfo,
    QuantParameters,
    RoundingMode,
    TensorDirection,
    TensorType,
)
from copyless.layout import _kernels, hw_info_for, plan_for

F32, U8, I64 = 9, 2, 10  # C type codes (plan._TYPE_CODE)
COPY, QUANT = 0, 2


def cpu(shape: tuple[int, ...], data_type: DataType = DataType.FLOAT32) -> NpuTensorInfo:
    return NpuTensorInfo(
        "x", data_type, TensorDirection.INPUT, TensorType.CPU, MemoryLayout.NCHW, shape
    )


def raw_plan(**changes: Any) -> Any:
    """A valid 1-D float32 -> float32 copy of 4 items, with ``changes`` applied."""
    args: dict[str, Any] = dict(
        shape=[4], src_strides=[4], dst_strides=[4], src_type=F32, dst_type=F32, op=COPY,
        scale=1.0, zero_point=0, toward_zero=False, pad_dim=-1, cb_dim=-1, pad_mode=0,
        group=1, channels=0, pad_value=b"\0" * 4, src_nbytes=16, dst_nbytes=16,
    )  # fmt: skip
    args.update(changes)
    return _kernels.Plan(**args)


@pytest.mark.parametrize("scale", [1e-300, 1e-46, 1e300, 3.5e38])
def test_scales_that_are_zero_or_inf_in_float32_are_refused_in_python(scale: float) -> None:
    # fuzz_layout finding: QuantParameters(1e-300) passed (finite, > 0 as a double), the
    # kernel divided by float32 0 and wrote the zero point everywhere.
    hw = hw_info_for(cpu((1, 3, 2, 2)), MemoryLayout.NHWC4, DataType.UINT8)
    with pytest.raises(LayoutError, match="float32"):
        plan_for(cpu((1, 3, 2, 2)), hw, QuantParameters(scale, 0))


def test_uint64_zero_point_past_int64_is_a_layout_error() -> None:
    # fuzz_layout finding: an OverflowError escaped plan_for from the C argument parser.
    hw = hw_info_for(cpu((1, 3, 2, 2)), MemoryLayout.NCHW, DataType.UINT64)
    with pytest.raises(LayoutError, match="int64"):
        plan_for(cpu((1, 3, 2, 2)), hw, QuantParameters(1.0, 2**64 - 1))


# the block dim must come before its pad dim (walk() passes the block index down)
PAD_AFTER_BLOCK = dict(shape=[2, 2], src_strides=[8, 4], dst_strides=[8, 4], pad_dim=0, cb_dim=1,
                       pad_mode=1)  # fmt: skip


# fuzz_layout finding (UBSan): block 1 holds no real channel (3 channels, groups of 8), so
# nothing is read there, but walk() still formed its pointer: 1 * 2**62 overflowed.
BLOCK_WITHOUT_CHANNELS = dict(shape=[2, 4], src_strides=[2**62, 4], dst_strides=[16, 4],
                              pad_dim=1, cb_dim=0, pad_mode=1, group=8, channels=3,
                              dst_nbytes=32)  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        (dict(src_nbytes=15), "reach past"),  # 4 items of 4 bytes need 16
        (dict(shape=[5]), "reach past"),
        (dict(src_strides=[8]), "reach past"),
        (dict(shape=[2**40, 2**40], src_strides=[0, 0], dst_strides=[0, 0]), "too many"),
        (dict(shape=[3], src_strides=[2**62], dst_strides=[4]), "overflow"),
        (dict(dst_type=U8, pad_value=b"\0"), "operation"),  # a copy between two types
        (dict(src_type=I64, op=QUANT), "operation"),
        (dict(op=QUANT, dst_type=U8, scale=0.0, pad_value=b"\0"), "scale"),
        (dict(op=QUANT, dst_type=U8, scale=float("nan"), pad_value=b"\0"), "scale"),
        (dict(op=QUANT, dst_type=U8, zero_point=256, pad_value=b"\0"), "zero point"),
        (dict(pad_mode=1), "pad / block"),  # padding without a pad dim
        (PAD_AFTER_BLOCK, "pad / block"),
        (BLOCK_WITHOUT_CHANNELS, "reach past"),
        (dict(group=0), "padding"),
        (dict(pad_value=b"\0"), "one item"),
        (dict(src_nbytes=-1), "negative"),
    ],
)
def test_the_c_plan_refuses_what_does_not_fit_its_buffers(
    changes: dict[str, Any], why: str
) -> None:
    # fuzz_layout RAW mode finding: the kernel trusted Python's nest, and random
    # parameters read and wrote past the buffers (a segfault without the sanitizer).
    with pytest.raises(ValueError, match=why):
        raw_plan(**changes)


def test_padded_channels_bound_the_source_reach() -> None:
    # NCHW C=3 -> NHWC4: the pad dim has 4 positions but the source only 3 planes.
    shape = [2, 4]  # [pixels, channels]
    reach = 1 * 4 + 2 * 8 + 4  # last pixel, last real plane, one float
    plan = raw_plan(shape=shape, src_strides=[4, 8], dst_strides=[16, 4], pad_dim=1,
                    pad_mode=1, channels=3, src_nbytes=reach, dst_nbytes=32)  # fmt: skip
    src = np.arange(6, dtype=np.float32)  # planes [0 1] [2 3] [4 5]
    dst = np.full(8, -1, np.float32)
    plan.run(src, dst)
    assert dst.tolist() == [0, 2, 4, 0, 1, 3, 5, 0]


@pytest.mark.parametrize(
    ("data_type", "zp"),
    [(DataType.INT64, 2**63 - 2201), (DataType.UINT64, 2**63 - 7), (DataType.INT64, -(2**63))],
)
def test_64_bit_quantization_adds_the_zero_point_exactly(data_type: DataType, zp: int) -> None:
    # fuzz_layout finding: the zero point was added in doubles, so near 2**63 the result
    # lost its low bits (...3607 came out as ...3760).
    src = cpu((1, 1, 1, 5))
    dst = hw_info_for(src, MemoryLayout.NCHW, data_type)
    x = np.array([-1000.0, 0.0, 5.0, 1e30, -1e30], np.float32).reshape(src.shape)
    out = np.zeros(dst.shape, data_type.to_numpy())
    plan_for(src, dst, QuantParameters(1.0, zp)).run(x, out)
    info = np.iinfo(data_type.to_numpy())
    want = [min(max(int(v) + zp, int(info.min)), int(info.max)) for v in (-1000, 0, 5, 10**30,
                                                                           -(10**30))]  # fmt: skip
    assert [int(v) for v in out.reshape(-1)] == want


def test_an_uninitialised_plan_refuses_to_run() -> None:
    plan = _kernels.Plan.__new__(_kernels.Plan)
    with pytest.raises(ValueError, match="not initialised"):
        plan.run(np.zeros(16, np.uint8), np.zeros(16, np.uint8))


def check_fused(case: tuple[int, DataType, RoundingMode, float, int, int]) -> None:
    """NCHW float32 -> NHWC4 8-bit against the reference, dst at an odd byte offset."""
    channels, dtype, mode, scale, width, zp = case
    src_info = cpu((1, channels, 3, width))
    hw = hw_info_for(src_info, MemoryLayout.NHWC4, dtype)
    q = QuantParameters(scale, zp, mode)
    x = np.random.default_rng(width).normal(0, 300, src_info.shape).astype(np.float32)
    x.ravel()[::5] = np.round(x.ravel()[::5]) + 0.5  # ties
    x.ravel()[1:4] = [np.nan, np.inf, -np.inf]
    memory = np.full(hw.size_in_bytes + 1, 0xA5, np.uint8)
    plan = plan_for(src_info, hw, q)
    assert plan.kernel == "fused pixels"
    plan.run(x, memory[1:])  # UBSan: no misaligned 32-bit store
    want = to_layout(quantize(x, q, dtype), MemoryLayout.NHWC4, zp)
    got = memory[1:].view(dtype.to_numpy()).reshape(hw.shape)
    np.testing.assert_array_equal(got, want)
    assert memory[0] == 0xA5


FUSED_CASES = [
    (c, t, m, s, w, zp)
    for c, w in ((3, 37), (4, 8), (1, 2), (2, 1029))
    for t, zp in ((DataType.UINT8, 0), (DataType.UINT8, 255), (DataType.INT8, -128),
                  (DataType.INT8, 5))
    for m in (RoundingMode.ROUND_TO_NEAREST_EVEN, RoundingMode.ROUND_TOWARD_ZERO)
    for s in (1.0, 0.75)  # a power of two multiplies, others divide
]


@pytest.mark.parametrize("case", FUSED_CASES, ids=str)
def test_fused_pixels_match_the_reference(
    case: tuple[int, DataType, RoundingMode, float, int, int],
) -> None:
    check_fused(case)


def test_fused_pixels_sse2_path_matches_too() -> None:
    """The AVX2 kernel is picked at import; the SSE2 one runs where the CPU lacks AVX2."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import test_layout_kernel_checks as t\n"
        "for case in t.FUSED_CASES: t.check_fused(case)\n"
    )
    env = dict(os.environ, COPYLESS_KERNELS_NO_AVX2="1")
    here = str(Path(__file__).parent)
    subprocess.run([sys.executable, "-c", code, here], env=env, check=True, timeout=120)
