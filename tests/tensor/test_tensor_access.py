"""NpuTensor accessors over every memory type: shared views, sentinels, exported fds."""

from __future__ import annotations

import fcntl
import gc
import mmap
import os
import weakref
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import copyless as cl
from copyless.memory import HostMemory

MemFd = Callable[[int], int]
INFO = cl.NpuTensorInfo(
    "img",
    cl.DataType.FLOAT32,
    cl.TensorDirection.OUTPUT,
    cl.TensorType.HW,
    cl.MemoryLayout.NHWC,
    (1, 4, 4, 3),
)


@pytest.fixture(params=["NON_CMA", "CMA", "DMA_FD", "XRT_BO"])
def tensor(request: pytest.FixtureRequest, memfd: MemFd) -> Iterator[cl.NpuTensor]:
    kind = request.param
    if kind == "NON_CMA":
        cpu = cl.NpuTensorInfo(
            "img",
            cl.DataType.FLOAT32,
            cl.TensorDirection.OUTPUT,
            cl.TensorType.CPU,
            cl.MemoryLayout.NHWC,
            (1, 4, 4, 3),
        )
        made = cl.NpuTensor(cpu, np.zeros(48, np.float32), cl.MemoryType.USER_POINTER_NON_CMA)
    elif kind == "CMA":
        made = cl.NpuTensor(
            INFO, HostMemory.locked(192, warn_on_leak=False), cl.MemoryType.USER_POINTER_CMA
        )
    elif kind == "DMA_FD":
        made = cl.NpuTensor(INFO, memfd(192), cl.MemoryType.DMA_FD)
    else:
        made = cl.NpuTensor._wrap_memory(INFO, HostMemory.shared(192), cl.MemoryType.XRT_BO)
    yield made
    made.close()


def test_numpy_shares_memory(tensor: cl.NpuTensor) -> None:
    first, second = tensor.numpy(), tensor.numpy()
    assert first.shape == (1, 4, 4, 3) and first.dtype == np.float32
    assert np.shares_memory(first, second) and np.shares_memory(first, tensor.bytes_view())
    first[0, 1, 2, 0] = 5.0
    assert second[0, 1, 2, 0] == 5.0
    assert first.__array_interface__["data"][0] == tensor.address


def test_virtual_address_sentinel(tensor: cl.NpuTensor) -> None:
    if tensor.memory_type is cl.MemoryType.DMA_FD:
        assert tensor.get_virtual_address() == 0
        assert tensor.address != 0  # the runtime's own mapping still has one
    else:
        assert tensor.get_virtual_address() == tensor.numpy().__array_interface__["data"][0]


def test_export_buffer(tensor: cl.NpuTensor) -> None:
    exported = tensor.export_buffer()
    if tensor.memory_type in (cl.MemoryType.USER_POINTER_CMA, cl.MemoryType.USER_POINTER_NON_CMA):
        assert exported == -1
        return
    try:
        assert exported >= 0
        second = tensor.export_buffer()  # every call gives a NEW fd
        assert second not in (-1, exported)
        os.close(second)
        # Writing through the exported fd's own mapping lands in the tensor's memory.
        with mmap.mmap(exported, 192) as other:
            np.frombuffer(other, np.float32)[7] = 9.5
        assert tensor.numpy().reshape(-1)[7] == 9.5
    finally:
        os.close(exported)


def test_sync_buffer_is_callable(tensor: cl.NpuTensor) -> None:
    assert tensor.sync_buffer() is None


def test_get_buffer(tensor: cl.NpuTensor) -> None:
    buffer = tensor.get_buffer()
    if tensor.memory_type is cl.MemoryType.DMA_FD:
        assert isinstance(buffer, int) and os.fstat(buffer)
    elif tensor.memory_type is cl.MemoryType.XRT_BO:
        assert isinstance(buffer, HostMemory) and buffer.fd >= 0
    else:
        assert buffer is not None


def test_close_gives_sentinels(tensor: cl.NpuTensor) -> None:
    view = tensor.numpy()
    view[...] = 2.0
    tensor.close()
    tensor.close()  # idempotent
    assert tensor.closed and "closed" in repr(tensor)
    assert tensor.get_buffer() is None and tensor.get_virtual_address() == 0
    assert tensor.export_buffer() == -1 and tensor.nbytes == 0
    with pytest.raises(cl.TensorError, match="'img' is closed"):
        tensor.numpy()
    assert float(view.sum()) == 96.0  # an earlier view keeps its memory


def test_dma_fd_tensor_never_closes_the_callers_fd(memfd: MemFd) -> None:
    fd = memfd(192)
    tensor = cl.NpuTensor(INFO, fd, cl.MemoryType.DMA_FD)
    tensor.numpy()[...] = 1.0
    tensor.close()
    os.fstat(fd)
    assert os.pread(fd, 4, 0) == np.float32(1.0).tobytes()


def test_dma_fd_export_survives_the_caller_closing(memfd: MemFd) -> None:
    fd = memfd(192)
    tensor = cl.NpuTensor(INFO, fd, cl.MemoryType.DMA_FD)
    os.close(fd)
    reused = os.memfd_create("other")  # takes the caller's old number
    try:
        exported = tensor.export_buffer()
        assert os.fstat(exported).st_ino != os.fstat(reused).st_ino
        os.close(exported)
    finally:
        os.close(reused)
        tensor.close()


def test_owned_fd_is_closed_with_the_tensor(memfd: MemFd) -> None:
    fd = os.memfd_create("owned", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 192)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    tensor = cl.NpuTensor.from_fd(INFO, fd, take_ownership=True)
    tensor.close()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_owned_memory_is_released_when_collected() -> None:
    memory = HostMemory.shared(192)  # would warn if leaked: the tensor must close it
    fd = memory.fd
    tensor = cl.NpuTensor._wrap_memory(INFO, memory, cl.MemoryType.XRT_BO)
    del memory, tensor
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_tensor_keeps_its_producer_alive() -> None:
    array = np.zeros(48, np.float32)
    producer = weakref.ref(array)
    tensor = cl.NpuTensor.from_numpy(array)
    del array
    gc.collect()
    assert producer() is not None
    del tensor
    gc.collect()
    assert producer() is None


def test_strided_info_views_padded_rows() -> None:
    info = cl.NpuTensorInfo(
        "rows",
        cl.DataType.UINT16,
        cl.TensorDirection.INPUT,
        cl.TensorType.CPU,
        cl.MemoryLayout.NC,
        (3, 5),
        strides=(16, 2),
    )
    buffer = np.arange(3 * 8, dtype=np.uint16)
    view = cl.NpuTensor(
        info, buffer[: info.size_in_bytes // 2], cl.MemoryType.USER_POINTER_NON_CMA
    ).numpy()
    np.testing.assert_array_equal(view, buffer.reshape(3, 8)[:, :5])
    assert np.shares_memory(view, buffer)
