"""Sub-tensor views (what Runner.allocate_sub_tensor builds): shared bytes, lifetimes, bounds."""

from __future__ import annotations

import fcntl
import gc
import os
import weakref

import numpy as np
import pytest

import copyless as cl
from copyless.memory import HostMemory


def _info(
    name: str,
    shape: tuple[int, ...],
    data_type: cl.DataType = cl.DataType.FLOAT32,
    tensor_type: cl.TensorType = cl.TensorType.HW,
) -> cl.NpuTensorInfo:
    return cl.NpuTensorInfo(
        name, data_type, cl.TensorDirection.INPUT, tensor_type, cl.MemoryLayout.GENERIC, shape
    )


POOL = _info("pool", (1024,), cl.DataType.UINT8)


def _pool() -> cl.NpuTensor:
    return cl.NpuTensor._wrap_memory(POOL, HostMemory.shared(1024), cl.MemoryType.XRT_BO)


def test_sub_tensors_view_the_parent_bytes() -> None:
    parent = _pool()
    first = parent._sub_tensor(_info("a", (2, 4)), 0)
    second = parent._sub_tensor(_info("b", (16,), cl.DataType.INT16), 64)
    first.numpy()[...] = 1.5
    second.numpy()[...] = -7
    raw = parent.numpy()
    assert np.shares_memory(first.numpy(), raw) and np.shares_memory(second.numpy(), raw)
    assert not np.shares_memory(first.numpy(), second.numpy())
    np.testing.assert_array_equal(raw[:32].view(np.float32), np.full(8, 1.5, np.float32))
    np.testing.assert_array_equal(raw[64:96].view(np.int16), np.full(16, -7, np.int16))
    assert second.address == parent.address + 64 and second.offset == 64
    assert second.parent is parent and second.memory_type is cl.MemoryType.XRT_BO
    assert second.nbytes == 32


def test_sub_tensor_keeps_its_parent_alive() -> None:
    parent = _pool()
    fd = parent.get_buffer().fd
    alive = weakref.ref(parent)
    sub = parent._sub_tensor(_info("a", (4,)), 16)
    del parent
    gc.collect()
    assert alive() is not None
    os.fstat(fd)  # the parent's memory (and fd) lives while the sub-tensor does
    sub.numpy()[...] = 3.0
    del sub
    gc.collect()
    assert alive() is None
    with pytest.raises(OSError):
        os.fstat(fd)


def test_sub_tensor_exports_the_parents_whole_buffer() -> None:
    parent = _pool()
    sub = parent._sub_tensor(_info("a", (4,)), 512)
    fd = sub.export_buffer()
    try:
        assert os.fstat(fd).st_size == os.fstat(parent.get_buffer().fd).st_size
        os.pwrite(fd, np.float32(2.5).tobytes(), sub.offset)
        assert sub.numpy()[0] == 2.5
    finally:
        os.close(fd)
    parent.close()


def test_sub_tensor_of_a_dma_fd_tensor() -> None:
    fd = os.memfd_create("sub", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 1024)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    try:
        parent = cl.NpuTensor(POOL, fd, cl.MemoryType.DMA_FD)
        sub = parent._sub_tensor(_info("a", (4,)), 8)
        sub.numpy()[...] = 1.0
        assert os.pread(fd, 4, 8) == np.float32(1.0).tobytes()
        assert sub.get_virtual_address() == 0 and sub.get_buffer() == fd
        sub.close()
        parent.close()
    finally:
        os.close(fd)


def test_one_nesting_level() -> None:
    sub = _pool()._sub_tensor(_info("a", (8,)), 0)
    with pytest.raises(cl.TensorError, match="'a' is itself a sub-tensor"):
        sub._sub_tensor(_info("b", (2,)), 0)


@pytest.mark.parametrize(
    ("info", "offset", "message"),
    [
        (_info("a", (64,)), 772, r"bytes \[772, 1028\) exceed the parent 'pool' of 1024 bytes"),
        (_info("a", (257,)), 0, r"bytes \[0, 1028\) exceed"),
        (_info("a", (4,)), -4, "offset must be an int >= 0, got -4"),
        (_info("a", (4,)), 4.0, "offset must be an int >= 0, got 4.0"),
        (_info("a", (4,)), True, "offset must be an int >= 0, got True"),
        (_info("a", (4,)), 6, "offset 6 is not a multiple of the 4-byte FLOAT32 element"),
        (_info("a", (4,), cl.DataType.UNKNOWN), 0, "data type UNKNOWN"),
    ],
)
def test_bounds_and_offsets_are_checked(
    info: cl.NpuTensorInfo, offset: object, message: str
) -> None:
    parent = _pool()
    with pytest.raises(cl.TensorError, match=message):
        parent._sub_tensor(info, offset)  # type: ignore[arg-type]
    parent.close()


def test_last_byte_fits_exactly() -> None:
    parent = _pool()
    sub = parent._sub_tensor(_info("tail", (4,)), 1008)
    assert sub.nbytes == 16
    parent.close()


def test_hw_sub_tensor_of_pageable_memory_is_refused() -> None:
    parent = cl.NpuTensor.from_numpy(np.zeros(256, np.uint8))
    with pytest.raises(cl.MemoryTypeError, match="'a': a HW-view tensor needs device-visible"):
        parent._sub_tensor(_info("a", (4,)), 0)
    cpu = parent._sub_tensor(_info("a", (4,), tensor_type=cl.TensorType.CPU), 0)
    assert np.shares_memory(cpu.numpy(), parent.numpy())


def test_sub_tensor_of_a_closed_parent_is_refused() -> None:
    parent = _pool()
    parent.close()
    with pytest.raises(cl.TensorError, match="'pool' is closed"):
        parent._sub_tensor(_info("a", (4,)), 0)


def test_closing_the_parent_leaves_sub_views_valid() -> None:
    parent = _pool()
    sub = parent._sub_tensor(_info("a", (4,)), 0)
    parent.close()
    sub.numpy()[...] = 4.0  # the mapping lives on in the sub-tensor's view
    assert float(sub.numpy().sum()) == 16.0
    assert sub.export_buffer() == -1  # but the parent's fd is gone
