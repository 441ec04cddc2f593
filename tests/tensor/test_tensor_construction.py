"""NpuTensor construction: what wraps, and every documented refusal with its numbers."""

from __future__ import annotations

import dataclasses
import mmap
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import copyless as cl
from copyless.memory import HostMemory

MakeInfo = Callable[..., cl.NpuTensorInfo]
MemFd = Callable[[int], int]
NON_CMA = cl.MemoryType.USER_POINTER_NON_CMA
CMA = cl.MemoryType.USER_POINTER_CMA


@pytest.mark.parametrize(
    "make_buffer",
    [
        lambda n: np.zeros(n, np.uint8),
        lambda n: np.zeros((n // 4,), np.float32),
        lambda n: bytearray(n),
        lambda n: mmap.mmap(-1, n),
        lambda n: HostMemory.pageable(n, warn_on_leak=False),
    ],
    ids=["uint8", "float32", "bytearray", "mmap", "HostMemory"],
)
@pytest.mark.parametrize("memory_type", [NON_CMA, CMA], ids=lambda m: m.name)
def test_user_buffers_are_wrapped_not_copied(
    make_info: MakeInfo, make_buffer: Callable[[int], Any], memory_type: cl.MemoryType
) -> None:
    info = make_info((1, 3, 8, 8))
    buffer = make_buffer(info.size_in_bytes)
    tensor = cl.NpuTensor(info, buffer, memory_type)
    tensor.numpy()[0, 1, 2, 3] = 42.0
    raw = np.frombuffer(
        memoryview(buffer.array if isinstance(buffer, HostMemory) else buffer), np.uint8
    )
    assert np.shares_memory(tensor.numpy(), raw)
    assert raw.view(np.float32)[64 + 16 + 3] == 42.0
    assert tensor.get_buffer() is buffer
    assert tensor.memory_type is memory_type and tensor.get_memory_type() is memory_type
    assert tensor.info is info and tensor.get_info() is info
    tensor.close()


def test_hw_view_on_cma_locked_memory(make_info: MakeInfo) -> None:
    info = make_info(
        (1, 8, 8, 4),
        cl.DataType.UINT8,
        tensor_type=cl.TensorType.HW,
        memory_layout=cl.MemoryLayout.NHWC4,
    )
    with HostMemory.locked(info.size_in_bytes) as memory:
        tensor = cl.NpuTensor(info, memory, CMA)
        assert tensor.get_virtual_address() == memory.address
        assert np.shares_memory(tensor.numpy(), memory.array)


def test_from_numpy_derives_the_info() -> None:
    array = np.zeros((2, 3, 4, 5), np.float16)
    tensor = cl.NpuTensor.from_numpy(array, name="x", direction=cl.TensorDirection.OUTPUT)
    info = tensor.info
    assert (info.name, info.shape, info.data_type) == ("x", (2, 3, 4, 5), cl.DataType.FP16)
    assert info.memory_layout is cl.MemoryLayout.NCHW and info.direction.name == "OUTPUT"
    assert np.shares_memory(tensor.numpy(), array)
    with pytest.raises(cl.TensorError, match="'y': numpy dtype float64 has no copyless"):
        cl.NpuTensor.from_numpy(np.zeros(3), name="y")


# -- refusals --------------------------------------------------------------------------
def test_none_buffer(make_info: MakeInfo) -> None:
    with pytest.raises(cl.TensorError, match=r"tensor 't': no buffer given"):
        cl.NpuTensor(make_info(), None, NON_CMA)


@pytest.mark.parametrize(
    "make_buffer",
    [
        lambda n: np.zeros(n - 1, np.uint8),
        lambda n: bytearray(n - 4),
        lambda n: HostMemory.pageable(n - 1, warn_on_leak=False),
    ],
    ids=["numpy", "bytearray", "HostMemory"],
)
def test_too_small(make_info: MakeInfo, make_buffer: Callable[[int], Any]) -> None:
    info = make_info((1, 3, 8, 8))
    small = make_buffer(768)
    have = 767 if not isinstance(small, bytearray) else 764
    with pytest.raises(
        cl.TensorError,
        match=rf"'t': buffer of {have} bytes is smaller than the "
        r"768 bytes of 't' CPU NCHW FLOAT32 \[1, 3, 8, 8\]",
    ):
        cl.NpuTensor(info, small, NON_CMA)


def test_too_small_fd(make_info: MakeInfo, memfd: MemFd) -> None:
    fd = memfd(700)
    with pytest.raises(cl.TensorError, match=f"'t': fd {fd} holds 700 bytes, fewer than the 768"):
        cl.NpuTensor(make_info((1, 3, 8, 8)), fd, cl.MemoryType.DMA_FD)


def test_read_only_buffers_wrap_inputs_and_refuse_outputs(make_info: MakeInfo) -> None:
    info = make_info((4,), cl.DataType.UINT8)
    out = dataclasses.replace(info, direction=cl.TensorDirection.OUTPUT)
    frozen = np.arange(4, dtype=np.uint8)
    frozen.flags.writeable = False
    with mmap.mmap(-1, 4096, access=mmap.ACCESS_READ) as readonly:
        for buffer in (frozen, b"abcd", readonly):
            tensor = cl.NpuTensor(info, buffer, NON_CMA)  # an INPUT: wrapped, no copy
            assert not tensor.numpy().flags.writeable
            assert tensor.numpy().tobytes() == bytes(memoryview(buffer)[:4])
            del tensor
        with pytest.raises(cl.TensorError, match="'t': numpy buffer is read-only"):
            cl.NpuTensor(out, frozen, NON_CMA)
        with pytest.raises(cl.TensorError, match="'t': bytes buffer is read-only"):
            cl.NpuTensor(out, b"abcd", NON_CMA)
        with pytest.raises(cl.TensorError, match="'t': mmap buffer is read-only"):
            cl.NpuTensor(out, readonly, NON_CMA)
    assert cl.NpuTensor(info, frozen, NON_CMA).get_virtual_address() == frozen.ctypes.data


def test_not_contiguous(make_info: MakeInfo) -> None:
    strided = np.zeros((4, 8), np.uint8)[:, ::2]
    with pytest.raises(cl.TensorError, match=r"not C-contiguous \(strides \(8, 2\)\)"):
        cl.NpuTensor(make_info((4, 4), cl.DataType.UINT8), strided, NON_CMA)


def test_hw_view_refuses_pageable_memory(make_info: MakeInfo) -> None:
    info = make_info((1, 8, 8, 4), cl.DataType.UINT8, tensor_type=cl.TensorType.HW)
    with pytest.raises(cl.MemoryTypeError, match="'t': a HW-view tensor needs device-visible"):
        cl.NpuTensor(info, np.zeros(256, np.uint8), NON_CMA)
    assert issubclass(cl.MemoryTypeError, ValueError)


@pytest.mark.parametrize(
    ("memory_type", "buffer", "error", "message"),
    [
        (cl.MemoryType.UNKNOWN, bytearray(768), cl.MemoryTypeError, "known MemoryType"),
        ("DMA_FD", bytearray(768), cl.MemoryTypeError, "known MemoryType"),
        (cl.MemoryType.DMA_FD, bytearray(768), cl.TensorError, "wraps an int file descriptor"),
        (cl.MemoryType.DMA_FD, True, cl.TensorError, "wraps an int file descriptor, got bool"),
        (NON_CMA, 3, cl.TensorError, r"an int \(3\) is only a buffer for DMA_FD"),
        (NON_CMA, object(), cl.TensorError, "object does not expose a buffer"),
        (cl.MemoryType.XRT_BO, bytearray(768), cl.MemoryTypeError, "XRT_BO tensors come from"),
    ],
)
def test_wrong_buffer_for_the_memory_type(
    make_info: MakeInfo, memory_type: Any, buffer: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        cl.NpuTensor(make_info((1, 3, 8, 8)), buffer, memory_type)


def test_xrt_bo_needs_fd_backed_memory(make_info: MakeInfo) -> None:
    with HostMemory.locked(768) as memory, pytest.raises(cl.MemoryTypeError, match="XRT_BO"):
        cl.NpuTensor(make_info((1, 3, 8, 8)), memory, cl.MemoryType.XRT_BO)


def test_unknown_data_type_and_bad_info(make_info: MakeInfo) -> None:
    with pytest.raises(cl.TensorError, match="data type UNKNOWN"):
        cl.NpuTensor(make_info((4,), cl.DataType.UNKNOWN), bytearray(4), NON_CMA)
    with pytest.raises(cl.TensorError, match="info must be an NpuTensorInfo, got dict"):
        cl.NpuTensor({"shape": (4,)}, bytearray(4), NON_CMA)  # type: ignore[arg-type]


def test_closed_host_memory(make_info: MakeInfo) -> None:
    memory = HostMemory.pageable(768)
    memory.close()
    with pytest.raises(cl.TensorError, match="'t': <HostMemory pageable closed> is closed"):
        cl.NpuTensor(make_info((1, 3, 8, 8)), memory, CMA)


def test_unmappable_fds(make_info: MakeInfo, memfd: MemFd) -> None:
    info = make_info((1, 3, 8, 8))
    read_end, write_end = os.pipe()
    closed = memfd(4096)
    os.close(closed)
    try:
        with pytest.raises(cl.TensorError, match=f"'t': fd {read_end} is a pipe"):
            cl.NpuTensor(info, read_end, cl.MemoryType.DMA_FD)
        with pytest.raises(cl.TensorError, match=f"'t': fd {closed} is not an open file"):
            cl.NpuTensor(info, closed, cl.MemoryType.DMA_FD)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_errors_are_copyless_and_value_errors(make_info: MakeInfo) -> None:
    with pytest.raises(ValueError) as caught:
        cl.NpuTensor(make_info(), None, NON_CMA)
    assert isinstance(caught.value, cl.CopylessError)
