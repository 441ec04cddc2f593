"""convert() on NpuTensors, strided and unaligned memory, plan caching, threads."""

from __future__ import annotations

import threading

import numpy as np
from layout_reference import to_layout

from copyless import (
    DataType,
    HostMemory,
    MemoryLayout,
    MemoryType,
    NpuTensor,
    NpuTensorInfo,
    QuantParameters,
    TensorDirection,
    TensorType,
)
from copyless.layout import convert, convert_array, hw_info_for, plan_for

CPU = NpuTensorInfo(
    "img", DataType.FLOAT32, TensorDirection.INPUT, TensorType.CPU, MemoryLayout.NCHW, (1, 3, 5, 7)
)


def test_convert_tensors_in_place_of_their_memory() -> None:
    hw = hw_info_for(CPU, MemoryLayout.HCWNC4, DataType.UINT8)
    x = np.random.default_rng(1).uniform(0, 255, CPU.shape).astype(np.float32)
    src = NpuTensor(CPU, x, MemoryType.USER_POINTER_NON_CMA)
    with HostMemory.shared(hw.size_in_bytes) as memory:
        dst = NpuTensor(hw, memory, MemoryType.XRT_BO)
        convert(src, dst, QuantParameters(1.0))
        assert np.array_equal(
            dst.numpy(), to_layout(np.rint(x).astype(np.uint8), MemoryLayout.HCWNC4, 0)
        )
        back = NpuTensor(CPU, np.zeros(CPU.shape, np.float32), MemoryType.USER_POINTER_NON_CMA)
        convert(dst, back, QuantParameters(1.0))
        assert np.array_equal(back.numpy(), np.rint(x))
        del dst


def test_unaligned_bytes_and_strided_rows() -> None:
    hw = hw_info_for(CPU, MemoryLayout.NHWC, DataType.FP16)
    x = np.arange(CPU.size, dtype=np.float32).reshape(CPU.shape)
    raw = np.zeros(hw.size_in_bytes + 1, np.uint8)
    convert_array(x, CPU, raw[1:], hw)  # odd address: alignment-safe path
    assert np.array_equal(raw[1:].view(np.float16).reshape(hw.shape), x.transpose(0, 2, 3, 1))
    # A source whose rows are padded to 8 floats: info.strides describe the memory.
    strided = NpuTensorInfo(
        "img",
        DataType.FLOAT32,
        TensorDirection.INPUT,
        TensorType.CPU,
        MemoryLayout.NCHW,
        CPU.shape,
        strides=(3 * 5 * 32, 5 * 32, 32, 4),
    )
    base = np.full((1, 3, 5, 8), -1, np.float32)
    base[..., :7] = x
    out = np.zeros(hw.shape, np.float16)
    convert_array(base.reshape(-1).view(np.uint8), strided, out, hw)
    assert np.array_equal(out, x.transpose(0, 2, 3, 1))


def test_long_rows_cross_chunk_and_tile_boundaries() -> None:
    cpu = NpuTensorInfo(
        "big",
        DataType.FLOAT32,
        TensorDirection.INPUT,
        TensorType.CPU,
        MemoryLayout.NCHW,
        (1, 3, 37, 1500),
    )
    x = np.random.default_rng(2).uniform(-3, 300, cpu.shape).astype(np.float32)
    for layout, data_type in [
        (MemoryLayout.NHWC4, DataType.UINT8),
        (MemoryLayout.HCWNC4, DataType.BF16),
        (MemoryLayout.NHWC, DataType.FLOAT32),
        (MemoryLayout.NC4HW4, DataType.INT8),
    ]:
        hw = hw_info_for(cpu, layout, data_type)
        quant = QuantParameters(2.0, 1) if data_type.is_integer else None
        out = np.zeros(hw.shape, hw.numpy_dtype)
        convert_array(x, cpu, out, hw, quant)
        if quant is None:
            expected = x.astype(hw.numpy_dtype)
        else:
            info = np.iinfo(data_type.to_numpy())
            expected = np.clip(np.rint(x / np.float32(2.0)) + 1, info.min, info.max).astype(
                data_type.to_numpy()
            )
        pad = quant.zero_point if quant else 0
        assert np.array_equal(out, to_layout(expected, layout, pad)), layout
        back = np.zeros(cpu.shape, np.float32)
        convert_array(out, hw, back, cpu, quant)
        if quant is None:
            assert np.array_equal(back, expected.astype(np.float32))
        else:
            assert np.array_equal(back, (expected.astype(np.float32) - 1) * 2)


def test_plans_are_cached_and_shared_by_threads() -> None:
    hw = hw_info_for(CPU, MemoryLayout.NHWC4, DataType.UINT8)
    q = QuantParameters(1.0)
    assert plan_for(CPU, hw, q) is plan_for(CPU, hw, QuantParameters(1.0))
    big = NpuTensorInfo(
        "big",
        DataType.FLOAT32,
        TensorDirection.INPUT,
        TensorType.CPU,
        MemoryLayout.NCHW,
        (1, 3, 128, 128),
    )
    big_hw = hw_info_for(big, MemoryLayout.NHWC4, DataType.UINT8)
    plan = plan_for(big, big_hw, q)
    errors: list[str] = []

    def work(seed: int) -> None:
        x = np.random.default_rng(seed).uniform(0, 255, big.shape).astype(np.float32)
        out = np.zeros(big_hw.shape, np.uint8)
        for _ in range(20):
            plan.run(x, out)
            if not np.array_equal(out[..., :3], np.rint(x).astype(np.uint8).transpose(0, 2, 3, 1)):
                errors.append(f"thread {seed}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
