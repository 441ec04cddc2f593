"""Thousands of wrap / export / release cycles leave no fd and no memory behind."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable

import numpy as np
import psutil

import copyless as cl
from copyless.memory import HostMemory

NBYTES = 64 * 1024  # touched each cycle: a leak of one buffer per cycle would be ~190 MiB
CYCLES = 3000


def _info(name: str) -> cl.NpuTensorInfo:
    return cl.NpuTensorInfo(
        name,
        cl.DataType.FLOAT32,
        cl.TensorDirection.OUTPUT,
        cl.TensorType.HW,
        cl.MemoryLayout.NHWC,
        (1, 64, 64, 4),
    )


def _cycle(i: int, info: cl.NpuTensorInfo, sub_info: cl.NpuTensorInfo) -> None:
    owner = cl.NpuTensor._wrap_memory(info, HostMemory.shared(NBYTES), cl.MemoryType.XRT_BO)
    owner.numpy()[...] = i
    fd = owner.export_buffer()
    mapped = cl.NpuTensor(info, fd, cl.MemoryType.DMA_FD)  # wraps, never closes fd
    os.close(fd)
    again = mapped.export_buffer()
    received = cl.NpuTensor.from_fd(info, again, take_ownership=True)
    sub = received._sub_tensor(sub_info, 1024)
    through_dlpack = np.from_dlpack(sub)
    if through_dlpack[0, 0] != i or not np.shares_memory(through_dlpack, sub.numpy()):
        raise AssertionError(f"cycle {i}: memory not shared")
    user = cl.NpuTensor.from_dlpack(np.zeros(16, np.float32))
    locked = HostMemory.locked(4096)
    cma = cl.NpuTensor(sub_info, locked, cl.MemoryType.USER_POINTER_CMA)
    if i % 2:  # release explicitly on odd cycles, by dropping references on even ones
        for tensor in (sub, received, mapped, owner, user, cma):
            tensor.close()
    locked.close()


def test_no_fd_or_memory_leak(memory_fds: Callable[[], dict[int, str]]) -> None:
    info, sub_info = _info("whole"), _info("sub").with_shape((16, 16))
    for i in range(50):  # warm up allocator and caches before measuring
        _cycle(i, info, sub_info)
    gc.collect()
    fds_before = memory_fds()
    process = psutil.Process()
    rss_before = process.memory_info().rss
    for i in range(CYCLES):
        _cycle(i, info, sub_info)
    gc.collect()
    rss_after = process.memory_info().rss
    assert memory_fds() == fds_before
    assert rss_after - rss_before < 16 * 1024 * 1024, (rss_before, rss_after)
