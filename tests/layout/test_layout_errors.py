"""Conversions that must be refused, each with a LayoutError/UnsupportedError naming the views."""

from __future__ import annotations

import numpy as np
import pytest

from copyless import (
    CopylessError,
    DataType,
    LayoutError,
    MemoryLayout,
    NpuTensorInfo,
    QuantParameters,
    TensorDirection,
    TensorType,
    UnsupportedError,
)
from copyless.layout import convert_array, hw_info_for, plan_for


def info(
    layout: MemoryLayout,
    shape: tuple[int, ...],
    data_type: DataType = DataType.FLOAT32,
    order: tuple[int, ...] = (),
) -> NpuTensorInfo:
    return NpuTensorInfo(
        "img", data_type, TensorDirection.INPUT, TensorType.CPU, layout, shape, order
    )


CPU = info(MemoryLayout.NCHW, (1, 3, 4, 5))


@pytest.mark.parametrize(
    "dst",
    [
        info(MemoryLayout.NCHW, (1, 3, 4, 6)),
        info(MemoryLayout.NHWC, (1, 4, 5, 4)),
        info(MemoryLayout.NC, (3, 20)),
        hw_info_for(info(MemoryLayout.NCHW, (1, 9, 4, 5)), MemoryLayout.NC8HW8, DataType.FLOAT32),
        info(MemoryLayout.NHWC4, (1, 4, 5, 8)),
        info(MemoryLayout.GENERIC, (5, 4, 3, 2), order=(3, 2, 1, 0)),
        info(MemoryLayout.NHW, (1, 4, 5)),
    ],
    ids=lambda i: f"{i.memory_layout.name}{list(i.shape)}",
)
def test_views_of_different_logical_tensors(dst: NpuTensorInfo) -> None:
    with pytest.raises(LayoutError) as err:
        plan_for(CPU, dst)
    assert CPU.describe() in str(err.value) and dst.describe() in str(err.value)


def test_two_blocked_views_need_the_cpu_view() -> None:
    a = hw_info_for(CPU, MemoryLayout.NHWC4, DataType.UINT8)
    b = hw_info_for(CPU, MemoryLayout.NC4HW4, DataType.UINT8)
    with pytest.raises(LayoutError, match="blocked"):
        plan_for(a, b)
    plan_for(a, a)  # the same blocked view is a plain copy


def test_float_to_integer_needs_quant_params() -> None:
    hw = hw_info_for(CPU, MemoryLayout.NHWC4, DataType.INT8)
    with pytest.raises(LayoutError, match="missing quant params") as err:
        plan_for(CPU, hw)
    assert hw.describe() in str(err.value)
    with pytest.raises(LayoutError, match="missing quant params"):
        plan_for(hw, CPU)


@pytest.mark.parametrize(
    ("src_type", "dst_type"),
    [
        (DataType.FLOAT32, DataType.BF16),
        (DataType.INT8, DataType.INT32),
        (DataType.FLOAT32, DataType.BOOLEAN),
    ],
)
def test_quant_params_where_they_mean_nothing(src_type: DataType, dst_type: DataType) -> None:
    src = info(MemoryLayout.NCHW, CPU.shape, src_type)
    with pytest.raises(LayoutError, match="only between a float and an integer"):
        plan_for(src, hw_info_for(src, MemoryLayout.NHWC, dst_type), QuantParameters(0.5))


def test_zero_point_outside_the_integer_type() -> None:
    with pytest.raises(LayoutError, match="zero_point 300"):
        plan_for(
            CPU, hw_info_for(CPU, MemoryLayout.NHWC, DataType.UINT8), QuantParameters(1.0, 300)
        )


def test_unsupported_layouts() -> None:
    nhc = info(MemoryLayout.NHC, (1, 4, 3))
    with pytest.raises(UnsupportedError):
        plan_for(info(MemoryLayout.NCH, (1, 3, 4)), nhc)
    with pytest.raises(CopylessError):
        plan_for(CPU, info(MemoryLayout.UNKNOWN, (1, 3, 4, 5)))


def test_bad_buffers() -> None:
    hw = hw_info_for(CPU, MemoryLayout.NHWC, DataType.FLOAT32)
    src = np.zeros(CPU.shape, np.float32)
    with pytest.raises(LayoutError, match="bytes"):
        convert_array(src, CPU, np.zeros(10, np.uint8), hw)  # too small
    with pytest.raises(LayoutError, match="array of"):
        convert_array(src, CPU, np.zeros(hw.shape, np.float64), hw)  # wrong dtype
    with pytest.raises(LayoutError):
        convert_array(src, CPU, np.zeros(hw.shape, np.float32)[..., ::-1], hw)  # not contiguous
    ro = np.zeros(hw.shape, np.float32)
    ro.flags.writeable = False
    with pytest.raises(LayoutError):
        convert_array(src, CPU, ro, hw)
    shared = np.zeros(CPU.size * 2, np.float32)
    with pytest.raises(LayoutError, match="overlap"):
        convert_array(shared[: CPU.size].view(np.uint8), CPU, shared[4:].view(np.uint8), hw)
