"""Property-based round trips CPU -> HW -> CPU against the numpy reference (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from layout_reference import GROUP, IMAGE_LAYOUTS, quantize, to_layout

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

INT_TYPES = [DataType.UINT8, DataType.INT8, DataType.INT16, DataType.UINT16, DataType.INT32]


@st.composite
def cases(
    draw: st.DrawFn,
) -> tuple[tuple[int, int, int, int], MemoryLayout, DataType, QuantParameters]:
    dims = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 19)),
        draw(st.integers(1, 9)),
        draw(st.integers(1, 40)),
    )
    layout = draw(st.sampled_from([*IMAGE_LAYOUTS, MemoryLayout.NHW]))
    if layout is MemoryLayout.NHW:
        dims = (dims[0], 1, dims[2], dims[3])
    data_type = draw(st.sampled_from(INT_TYPES))
    info = np.iinfo(data_type.to_numpy())
    zp = draw(st.integers(max(int(info.min), -1000), min(int(info.max), 1000)))
    scale = draw(st.floats(1e-3, 50.0))
    mode = draw(st.sampled_from(list(RoundingMode)))
    return dims, layout, data_type, QuantParameters(scale, zp, mode)


@settings(max_examples=80, deadline=None)
@given(case=cases(), seed=st.integers(0, 2**32 - 1), nhwc=st.booleans())
def test_quantized_round_trip_within_half_a_step(
    case: tuple[tuple[int, int, int, int], MemoryLayout, DataType, QuantParameters],
    seed: int,
    nhwc: bool,
) -> None:
    dims, layout, data_type, quant = case
    n, c, h, w = dims
    cpu_layout = MemoryLayout.NHWC if nhwc and layout is not MemoryLayout.NHW else MemoryLayout.NCHW
    shape = (n, c, h, w) if cpu_layout is MemoryLayout.NCHW else (n, h, w, c)
    cpu = NpuTensorInfo(
        "x", DataType.FLOAT32, TensorDirection.INPUT, TensorType.CPU, cpu_layout, shape
    )
    hw = hw_info_for(cpu, layout, data_type)
    info = np.iinfo(data_type.to_numpy())
    rng = np.random.default_rng(seed)
    lo, hi = (
        (int(info.min) - quant.zero_point) * quant.scale,
        (int(info.max) - quant.zero_point) * quant.scale,
    )
    logical = rng.uniform(max(lo, -1e6) * 1.2, min(hi, 1e6) * 1.2, dims).astype(np.float32)
    src = to_layout(logical, cpu_layout, 0)

    hw_buf = np.full(hw.shape, 5, data_type.to_numpy())
    convert_array(src, cpu, hw_buf, hw, quant)
    assert np.array_equal(
        hw_buf, to_layout(quantize(logical, quant, data_type), layout, quant.zero_point)
    )

    back = np.empty(cpu.shape, np.float32)
    convert_array(hw_buf, hw, back, cpu, quant)
    clipped = np.clip(to_layout(logical, cpu_layout, 0).astype(np.float64), lo, hi)
    step = quant.scale if quant.rounding_mode is RoundingMode.ROUND_TOWARD_ZERO else quant.scale / 2
    assert np.all(np.abs(back - clipped) <= step * (1 + 1e-5) + 1e-6 * np.abs(clipped))


@settings(max_examples=60, deadline=None)
@given(
    dims=st.tuples(st.integers(1, 3), st.integers(1, 20), st.integers(1, 6), st.integers(1, 6)),
    layout=st.sampled_from(IMAGE_LAYOUTS),
    data_type=st.sampled_from([DataType.FLOAT32, DataType.BF16, DataType.FP16]),
)
def test_float_views_round_trip_exactly_on_representable_values(
    dims: tuple[int, int, int, int], layout: MemoryLayout, data_type: DataType
) -> None:
    cpu = NpuTensorInfo(
        "x", DataType.FLOAT32, TensorDirection.INPUT, TensorType.CPU, MemoryLayout.NCHW, dims
    )
    hw = hw_info_for(cpu, layout, data_type)
    logical = np.arange(np.prod(dims), dtype=np.float32).reshape(dims) % 200 - 100  # exact in bf16
    hw_buf = np.empty(hw.shape, hw.numpy_dtype)
    convert_array(logical, cpu, hw_buf, hw)
    back = np.empty(dims, np.float32)
    convert_array(hw_buf, hw, back, cpu)
    assert np.array_equal(back, logical)
    g = GROUP.get(layout, 1)
    padded = to_layout(np.ones(dims, np.float32), layout, 0).astype(np.float32)
    assert int(
        np.count_nonzero(hw_buf.astype(np.float32) == 0) - np.count_nonzero(logical == 0)
    ) == (padded.size - np.count_nonzero(padded)), (
        f"padding of {layout.name} (group {g}) is not all zero"
    )


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=6),
    data=st.data(),
)
def test_generic_order_is_a_transpose(shape: list[int], data: st.DataObject) -> None:
    order = tuple(data.draw(st.permutations(range(len(shape)))))
    cpu = NpuTensorInfo(
        "x",
        DataType.INT16,
        TensorDirection.OUTPUT,
        TensorType.CPU,
        MemoryLayout.GENERIC,
        tuple(shape),
    )
    hw = hw_info_for(cpu, MemoryLayout.GENERIC, DataType.INT16, order)
    x = np.arange(np.prod(shape), dtype=np.int16).reshape(shape)
    hw_buf = np.empty(hw.shape, np.int16)
    convert_array(x, cpu, hw_buf, hw)
    assert np.array_equal(hw_buf, np.transpose(x, order))
    back = np.empty_like(x)
    convert_array(hw_buf, hw, back, cpu)
    assert np.array_equal(back, x)
