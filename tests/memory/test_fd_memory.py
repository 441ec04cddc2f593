"""Mapping shareable fds: memfd, /dev/shm files, dma-buf sizing, and every refusal."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import copyless as cl
from copyless.memory import HostMemory
from copyless.memory import _host as host
from copyless.memory._host import mappable_size

MemFd = Callable[[int], int]


@pytest.fixture
def shm_path() -> Iterator[str]:
    path = f"/dev/shm/copyless-test-{uuid.uuid4().hex}"
    yield path
    if os.path.exists(path):
        os.unlink(path)


def test_memfd_is_mapped_shared(memfd: MemFd) -> None:
    fd = memfd(3 * 4096)
    with HostMemory.from_fd(fd, 4096) as memory:
        assert memory.nbytes == 3 * 4096 and memory.kind == "fd"
        assert memory.fd == -1 and memory.export_fd() == -1  # the caller kept fd
        memory.array[10:14] = [1, 2, 3, 4]
        assert os.pread(fd, 4, 10) == b"\x01\x02\x03\x04"
        os.pwrite(fd, b"\xff", 0)
        assert memory.array[0] == 255
    os.fstat(fd)  # close() left the caller's fd open


def test_dev_shm_file_opened_with_os_open(shm_path: str) -> None:
    fd = os.open(shm_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, 1000)  # not a page multiple
        with HostMemory.from_fd(fd, 1000) as memory:
            memory.array[:] = np.arange(1000) % 256
        with open(shm_path, "rb") as again:  # another open of the same file sees the bytes
            assert again.read() == bytes((np.arange(1000) % 256).astype(np.uint8))
    finally:
        os.close(fd)


def test_dma_buf_is_sized_with_lseek(memfd: MemFd, monkeypatch: pytest.MonkeyPatch) -> None:
    # A dma-buf reports st_size 0 and a type-less mode; only SEEK_END gives its size.
    fd = memfd(5 * 4096)
    os.lseek(fd, 123, os.SEEK_SET)
    real_fstat = os.fstat

    def dma_buf_fstat(number: int) -> os.stat_result:
        st = list(real_fstat(number))
        st[0], st[6] = 0o600, 0  # st_mode, st_size
        return os.stat_result(st)

    monkeypatch.setattr(host.os, "fstat", dma_buf_fstat)
    assert mappable_size(fd) == 5 * 4096
    assert os.lseek(fd, 0, os.SEEK_CUR) == 123  # file offset restored


def test_dup_keeps_memory_exportable_after_the_caller_closes(memfd: MemFd) -> None:
    fd = memfd(4096)
    memory = HostMemory.from_fd(fd, dup=True)
    os.close(fd)
    try:
        exported = memory.export_fd()
        assert exported >= 0
        os.pwrite(exported, b"ok", 0)
        os.close(exported)
        assert bytes(memory.array[:2]) == b"ok"
    finally:
        memory.close()


def test_own_fd_is_closed_by_close(memfd: MemFd) -> None:
    fd = memfd(4096)
    memory = HostMemory.from_fd(fd, own_fd=True)
    assert memory.fd == fd
    memory.close()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_own_fd_and_dup_are_exclusive(memfd: MemFd) -> None:
    with pytest.raises(cl.TensorError, match="exclusive"):
        HostMemory.from_fd(memfd(4096), own_fd=True, dup=True)


def test_closed_fd(memfd: MemFd) -> None:
    fd = memfd(4096)
    os.close(fd)
    with pytest.raises(cl.TensorError, match=f"fd {fd} is not an open file descriptor"):
        HostMemory.from_fd(fd)


@pytest.mark.parametrize(("flags", "name"), [(os.O_RDONLY, "O_RDONLY"), (os.O_WRONLY, "O_WRONLY")])
def test_fd_not_open_read_write(shm_path: str, flags: int, name: str) -> None:
    os.close(os.open(shm_path, os.O_RDWR | os.O_CREAT, 0o600))
    os.truncate(shm_path, 4096)
    fd = os.open(shm_path, flags)
    try:
        with pytest.raises(cl.TensorError, match=f"fd {fd} is open {name}; .* needs O_RDWR"):
            HostMemory.from_fd(fd)
    finally:
        os.close(fd)


def test_pipe_and_socket_are_refused() -> None:
    read_end, write_end = os.pipe()
    left, right = socket.socketpair()
    try:
        with pytest.raises(cl.TensorError, match=f"fd {read_end} is a pipe"):
            HostMemory.from_fd(read_end)
        with pytest.raises(cl.TensorError, match=f"fd {left.fileno()} is a socket"):
            HostMemory.from_fd(left.fileno())
    finally:
        os.close(read_end)
        os.close(write_end)
        left.close()
        right.close()


def test_directory_is_refused() -> None:
    fd = os.open("/dev/shm", os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(cl.TensorError, match=f"fd {fd} is a directory"):
            HostMemory.from_fd(fd)
    finally:
        os.close(fd)


def test_too_small_names_the_numbers(memfd: MemFd) -> None:
    fd = memfd(1000)
    with pytest.raises(cl.TensorError, match=f"fd {fd} holds 1000 bytes, fewer than the 1001"):
        HostMemory.from_fd(fd, 1001)
    empty = memfd(0)
    with pytest.raises(cl.TensorError, match=f"fd {empty} holds 0 bytes"):
        HostMemory.from_fd(empty)


@pytest.mark.parametrize("fd", [-1, True, 3.0, "3", None])
def test_not_an_fd(fd: object) -> None:
    with pytest.raises(cl.TensorError, match="expected a file descriptor"):
        HostMemory.from_fd(fd)  # type: ignore[arg-type]
