"""Every layout x dtype pair, both directions, against the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from layout_reference import (
    ALL_TYPES,
    IMAGE_LAYOUTS,
    convert_elements,
    from_layout,
    np_type,
    same,
    sample,
    to_layout,
)

from copyless import (
    DataType,
    MemoryLayout,
    NpuTensorInfo,
    QuantParameters,
    RoundingMode,
    TensorDirection,
    TensorType,
)
from copyless.layout import convert_array, hw_info_for

DIMS = (2, 5, 3, 4)  # N > 1, C not a multiple of any group


def cpu_info(data_type: DataType, layout: MemoryLayout = MemoryLayout.NCHW) -> NpuTensorInfo:
    n, c, h, w = DIMS
    shape = (n, c, h, w) if layout is MemoryLayout.NCHW else (n, h, w, c)
    return NpuTensorInfo("t", data_type, TensorDirection.INPUT, TensorType.CPU, layout, shape)


def quant_for(s: DataType, d: DataType) -> QuantParameters | None:
    mixed = (s.is_float and d.is_integer) or (s.is_integer and d.is_float)
    return QuantParameters(0.75, 3 if d is not DataType.INT8 else -2) if mixed else None


@pytest.mark.parametrize("cpu_layout", [MemoryLayout.NCHW, MemoryLayout.NHWC])
@pytest.mark.parametrize("layout", IMAGE_LAYOUTS, ids=lambda m: m.name)
@pytest.mark.parametrize("hw_type", ALL_TYPES, ids=lambda t: t.name)
def test_float_cpu_to_every_hw_view_and_back(
    cpu_layout: MemoryLayout, layout: MemoryLayout, hw_type: DataType
) -> None:
    rng = np.random.default_rng(hash((layout.name, hw_type.name)) % 2**32)
    cpu = cpu_info(DataType.FLOAT32, cpu_layout)
    hw = hw_info_for(cpu, layout, hw_type)
    quant = quant_for(DataType.FLOAT32, hw_type)
    logical = sample(DataType.FLOAT32, DIMS, rng)
    src = to_layout(logical, cpu_layout, 0)
    dst = np.full(hw.shape, 77, dtype=np_type(hw_type))  # stale bytes: padding must overwrite

    convert_array(src, cpu, dst, hw, quant)

    pad = quant.zero_point if quant is not None and hw_type.is_integer else 0
    expected = to_layout(convert_elements(logical, DataType.FLOAT32, hw_type, quant), layout, pad)
    assert same(dst, expected)

    back = np.zeros(cpu.shape, np.float32)
    convert_array(dst, hw, back, cpu, quant)
    converted = convert_elements(logical, DataType.FLOAT32, hw_type, quant)
    expected_back = convert_elements(converted, hw_type, DataType.FLOAT32, quant)
    assert same(back, to_layout(expected_back, cpu_layout, 0))


@pytest.mark.parametrize("src_type", ALL_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("dst_type", ALL_TYPES, ids=lambda t: t.name)
def test_every_dtype_pair_through_a_transpose(src_type: DataType, dst_type: DataType) -> None:
    rng = np.random.default_rng(src_type.value * 31 + dst_type.value)
    src_info = cpu_info(src_type)
    dst_info = hw_info_for(src_info, MemoryLayout.NC4HW4, dst_type)
    quant = quant_for(src_type, dst_type)
    if quant is not None:
        quant = QuantParameters(quant.scale, quant.zero_point, RoundingMode.ROUND_TOWARD_ZERO)
    logical = sample(src_type, DIMS, rng)
    dst = np.zeros(dst_info.shape, np_type(dst_type))

    convert_array(logical, src_info, dst, dst_info, quant)

    expected = convert_elements(logical, src_type, dst_type, quant)
    assert same(from_layout(dst, MemoryLayout.NC4HW4, DIMS), expected)


@pytest.mark.parametrize("data_type", [DataType.INT64, DataType.UINT64])
def test_64_bit_copies_are_exact(data_type: DataType) -> None:
    info = np.iinfo(data_type.to_numpy())
    values = [int(info.max), int(info.max) - 1, int(info.min), int(info.min) + 1, 2**53 + 1, 1]
    logical = np.resize(np.array(values, dtype=data_type.to_numpy()), DIMS)
    cpu = cpu_info(data_type)
    for layout in (MemoryLayout.NHWC, MemoryLayout.HCWNC8):
        hw = hw_info_for(cpu, layout, data_type)
        dst = np.zeros(hw.shape, data_type.to_numpy())
        convert_array(logical, cpu, dst, hw)
        back = np.zeros_like(logical)
        convert_array(dst, hw, back, cpu)
        assert np.array_equal(back, logical)
        assert np.array_equal(dst, to_layout(logical, layout, 0))
