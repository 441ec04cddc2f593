"""Quantization rules: both rounding modes on ties, saturation, NaN, padding value."""

from __future__ import annotations

import numpy as np
import pytest

from copyless import (
    DataType,
    MemoryLayout,
    NpuTensorInfo,
    QuantParameters,
    RoundingMode,
    TensorDirection,
    TensorType,
)
from copyless.layout import convert_array, hw_info_for, plan_for

TIES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 2.5001, 0.0, -0.0]


def flat(data_type: DataType, n: int, layout: MemoryLayout = MemoryLayout.NCHW) -> NpuTensorInfo:
    return NpuTensorInfo(
        "q", data_type, TensorDirection.INPUT, TensorType.CPU, layout, (1, 1, 1, n)
    )


@pytest.mark.parametrize(
    "data_type", [DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64]
)
@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (RoundingMode.ROUND_TO_NEAREST_EVEN, [0, 2, 2, 0, -2, -2, 2, 3, 0, 0]),
        (RoundingMode.UNKNOWN, [0, 2, 2, 0, -2, -2, 2, 3, 0, 0]),
        (RoundingMode.ROUND_TOWARD_ZERO, [0, 1, 2, 0, -1, -2, 2, 2, 0, 0]),
    ],
)
def test_rounding_modes_on_ties(
    data_type: DataType, mode: RoundingMode, expected: list[int]
) -> None:
    # Long enough for the SIMD body and the scalar tail to both see every tie.
    x = np.tile(np.array(TIES, np.float32), 5)
    out = np.zeros(x.size, data_type.to_numpy())
    convert_array(
        x.reshape(1, 1, 1, -1),
        flat(DataType.FLOAT32, x.size),
        out.reshape(1, 1, 1, -1),
        flat(data_type, x.size),
        QuantParameters(1.0, 0, mode),
    )
    assert out.tolist() == expected * 5


@pytest.mark.parametrize("scale", [1.0, 0.25, 1 / 255, 0.1])
def test_scale_divides_in_float32(scale: float) -> None:
    x = (np.arange(-300, 300, dtype=np.float32) * np.float32(scale) * np.float32(1.0000001)).astype(
        np.float32
    )
    out = np.zeros(x.size, np.int16)
    convert_array(
        x.reshape(1, 1, 1, -1),
        flat(DataType.FLOAT32, x.size),
        out.reshape(1, 1, 1, -1),
        flat(DataType.INT16, x.size),
        QuantParameters(scale),
    )
    assert np.array_equal(out, np.rint(x / np.float32(scale)).astype(np.int16))


@pytest.mark.parametrize(
    ("data_type", "zp", "expected"),
    [
        (DataType.UINT8, 0, [255, 0, 255, 0, 0, 3]),
        (DataType.UINT8, 128, [255, 0, 255, 0, 128, 131]),
        (DataType.INT8, 0, [127, -128, 127, -128, 0, 3]),
        (DataType.INT8, -10, [127, -128, 127, -128, -10, -7]),
        (DataType.UINT16, 5, [305, 0, 65535, 0, 5, 8]),
    ],
)
def test_saturation_and_nan(data_type: DataType, zp: int, expected: list[int]) -> None:
    x = np.array([300.0, -300.0, np.inf, -np.inf, np.nan, 3.0] * 6, np.float32)
    out = np.zeros(x.size, data_type.to_numpy())
    convert_array(
        x.reshape(1, 1, 1, -1),
        flat(DataType.FLOAT32, x.size),
        out.reshape(1, 1, 1, -1),
        flat(data_type, x.size),
        QuantParameters(1.0, zp),
    )
    assert out.tolist() == expected * 6


def test_integer_narrowing_saturates() -> None:
    x = np.array([300, -5, 200, -200, 2**40, -(2**40)], np.int64)
    for data_type, expected in [
        (DataType.UINT8, [255, 0, 200, 0, 255, 0]),
        (DataType.INT8, [127, -5, 127, -128, 127, -128]),
        (DataType.UINT64, [300, 0, 200, 0, 2**40, 0]),
        (DataType.BOOLEAN, [True] * 6),
    ]:
        out = np.zeros(x.size, data_type.to_numpy())
        convert_array(
            x.reshape(1, 1, 1, -1),
            flat(DataType.INT64, x.size),
            out.reshape(1, 1, 1, -1),
            flat(data_type, x.size),
        )
        assert out.tolist() == expected, data_type
    big = np.array([2**64 - 1, 2**63, 2**63 - 1, 0], np.uint64)
    out = np.zeros(4, np.int64)
    convert_array(
        big.reshape(1, 1, 1, 4),
        flat(DataType.UINT64, 4),
        out.reshape(1, 1, 1, 4),
        flat(DataType.INT64, 4),
    )
    assert out.tolist() == [2**63 - 1, 2**63 - 1, 2**63 - 1, 0]


@pytest.mark.parametrize("layout", [MemoryLayout.NHWC4, MemoryLayout.NC8HW8, MemoryLayout.HCWNC16])
def test_padding_is_the_zero_point_for_quantized_views(layout: MemoryLayout) -> None:
    cpu = NpuTensorInfo(
        "x",
        DataType.FLOAT32,
        TensorDirection.INPUT,
        TensorType.CPU,
        MemoryLayout.NCHW,
        (2, 3, 4, 5),
    )
    hw = hw_info_for(cpu, layout, DataType.UINT8)
    out = np.full(hw.shape, 9, np.uint8)
    convert_array(np.zeros(cpu.shape, np.float32), cpu, out, hw, QuantParameters(0.5, 42))
    assert np.all(out == 42)
    hw_f = hw_info_for(cpu, layout, DataType.FP16)
    out_f = np.full(hw_f.shape, 9, np.float16)
    convert_array(np.ones(cpu.shape, np.float32), cpu, out_f, hw_f)
    assert (
        np.count_nonzero(out_f == 0) == out_f.size - cpu.size
        and np.count_nonzero(out_f == 1) == cpu.size
    )


def test_dequantize_then_bf16_rounds_to_nearest_even() -> None:
    cpu = flat(DataType.BF16, 3)
    q = np.array([1, 2, 255], np.uint8).reshape(1, 1, 1, 3)
    out = np.zeros((1, 1, 1, 3), cpu.numpy_dtype)
    convert_array(q, flat(DataType.UINT8, 3), out, cpu, QuantParameters(1 / 3, 1))
    expected = ((q.astype(np.float64) - 1).astype(np.float32) * np.float32(1 / 3)).astype(
        cpu.numpy_dtype
    )
    assert np.array_equal(out.astype(np.float32), expected.astype(np.float32))


def test_specialised_kernels_serve_the_hot_pairs() -> None:
    cpu = NpuTensorInfo(
        "x",
        DataType.FLOAT32,
        TensorDirection.INPUT,
        TensorType.CPU,
        MemoryLayout.NCHW,
        (1, 3, 8, 8),
    )
    rgbx = hw_info_for(cpu, MemoryLayout.NHWC4, DataType.UINT8)
    assert plan_for(cpu, rgbx, QuantParameters(1.0)).kernel == "fused pixels"
    assert plan_for(rgbx, cpu, QuantParameters(1.0)).kernel == "specialised"
    assert (
        plan_for(cpu, hw_info_for(cpu, MemoryLayout.HCWNC4, DataType.BF16)).kernel == "specialised"
    )
    assert plan_for(cpu, hw_info_for(cpu, MemoryLayout.NHWC, DataType.FLOAT32)).kernel == "copy"
