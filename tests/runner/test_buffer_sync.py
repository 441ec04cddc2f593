"""skip_in_bo_sync / skip_out_bo_sync / sync_buffer: where a sync exists (dma-bufs), the
runner flushes inputs before a job and invalidates outputs after it unless told to skip,
and the application's own ``sync_buffer`` calls reach the kernel."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import numpy as np
import pytest
from runner_helpers import reference

import copyless as cl
from copyless.memory import _dmabuf as dmabuf

IN, OUT, HW = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT, cl.TensorType.HW
FLUSH = dmabuf.SYNC_END | dmabuf.SYNC_WRITE
INVALIDATE = dmabuf.SYNC_START | dmabuf.SYNC_READ


@pytest.fixture
def fake_dmabufs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """memfds that say they are dma-bufs, and the DMA_BUF_IOCTL_SYNC calls they receive.
    (This machine has no dma-buf exporter: /dev/udmabuf and /dev/dma_heap are absent; the
    test below uses udmabuf where it exists.)"""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(dmabuf, "is_dmabuf", lambda fd: True)
    monkeypatch.setattr(dmabuf, "_ioctl", lambda fd, flags: calls.append((fd, flags)))
    return calls


def _fd_tensor(info: cl.NpuTensorInfo) -> cl.NpuTensor:
    fd = os.memfd_create("sync-test", os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, info.size_in_bytes)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        return cl.NpuTensor(info, fd, cl.MemoryType.DMA_FD)
    finally:
        os.close(fd)  # the tensor keeps a private duplicate


@pytest.mark.parametrize(("skip_in", "skip_out"), [(False, False), (True, False),
                                                   (False, True), (True, True)])  # fmt: skip
def test_runner_syncs_dmabuf_tensors_unless_skipped(
    tiny, fake_dmabufs, skip_in: bool, skip_out: bool
) -> None:
    model, compiled = tiny
    options = {"skip_in_bo_sync": skip_in, "skip_out_bo_sync": skip_out}
    with cl.RunnerFactory.from_compiled(compiled, options) as runner:
        (i,), (o,) = runner.get_tensors_info(IN, HW), runner.get_tensors_info(OUT, HW)
        x, y = _fd_tensor(i), _fd_tensor(o)
        assert x.needs_sync and y.needs_sync
        data = np.random.default_rng(2).standard_normal(i.shape).astype(np.float32)
        x.numpy()[...] = data
        for _ in range(3):  # a repeated call is not replayed past its syncs
            assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
        job = runner.execute_async([[x]], [[y]])
        assert runner.wait(job, 10_000) is cl.StatusCode.SUCCESS
        np.testing.assert_allclose(y.numpy(), reference(model, {"input": data})[0],
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
        expected = ([FLUSH] if not skip_in else []) + ([INVALIDATE] if not skip_out else [])
        assert [flags for _fd, flags in fake_dmabufs] == expected * 4
        assert runner.get_property("buffer_syncs") == len(expected) * 4
        fake_dmabufs.clear()
        x.sync_buffer()  # the application's own calls, as VART asks when skipping
        y.sync_buffer()
        assert [flags for _fd, flags in fake_dmabufs] == [FLUSH, INVALIDATE]


def test_host_memory_needs_no_sync(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(dmabuf, "_ioctl", lambda fd, flags: calls.append(flags))
    with cl.RunnerFactory.from_compiled(tiny[1]) as runner:
        (i,), (o,) = runner.get_tensors_info(IN, HW), runner.get_tensors_info(OUT, HW)
        tensors = [runner.allocate_npu_tensor(i), _fd_tensor(i), runner.allocate_npu_tensor(o)]
        for tensor in tensors:
            assert not tensor.needs_sync
            tensor.sync_buffer()  # always callable, a no-op on coherent memory
        assert runner.execute([tensors[:1]], [tensors[2:]]) is cl.StatusCode.SUCCESS
        assert runner.get_property("buffer_syncs") == 0 and calls == []


@pytest.mark.skipif(not Path("/dev/udmabuf").exists(), reason="needs /dev/udmabuf (a dma-buf)")
def test_a_real_udmabuf_is_synced_by_the_kernel(tiny) -> None:  # pragma: no cover - hardware
    import fcntl
    import struct

    with cl.RunnerFactory.from_compiled(tiny[1]) as runner:
        (i,) = runner.get_tensors_info(IN, HW)
        size = -(-i.size_in_bytes // 4096) * 4096
        memfd = os.memfd_create("udmabuf", os.MFD_ALLOW_SEALING)
        os.ftruncate(memfd, size)
        fcntl.fcntl(memfd, 1033, 2)  # F_ADD_SEALS, F_SEAL_SHRINK
        dev = os.open("/dev/udmabuf", os.O_RDWR)
        create = bytearray(struct.pack("=IIQQ", memfd, 1, 0, size))  # UDMABUF_FLAGS_CLOEXEC
        buf_fd = fcntl.ioctl(dev, 0x40187542, create, True)  # UDMABUF_CREATE: the new fd
        assert dmabuf.is_dmabuf(buf_fd)
        tensor = cl.NpuTensor(i, buf_fd, cl.MemoryType.DMA_FD)
        assert tensor.needs_sync
        tensor.sync_buffer()
        for fd in (buf_fd, dev, memfd):
            os.close(fd)
