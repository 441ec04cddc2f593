from __future__ import annotations

import gc
import os
import warnings

import numpy as np
import pytest

import copyless as cl
from copyless.memory import PAGE_SIZE, HostMemory


@pytest.mark.parametrize("kind", ["pageable", "locked", "shared"])
def test_constructors_give_zeroed_writable_memory(kind: str) -> None:
    with getattr(HostMemory, kind)(10_000) as memory:
        assert memory.kind == kind and memory.nbytes == 10_000 and not memory.closed
        assert not memory.array.any()
        memory.array[:] = 7
        assert np.shares_memory(memory.array, memory.array[5:])
        assert memory.address == memory.array.__array_interface__["data"][0]


@pytest.mark.parametrize("kind", ["locked", "shared"])
def test_mapped_memory_is_page_aligned(kind: str) -> None:
    with getattr(HostMemory, kind)(3) as memory:
        assert memory.address % PAGE_SIZE == 0


def test_close_is_idempotent_and_never_closes_a_reused_fd() -> None:
    memory = HostMemory.shared(100)
    fd = memory.fd
    memory.close()
    reused = os.memfd_create("reuse")  # the kernel hands out the lowest free number
    try:
        assert reused == fd
        memory.close()
        os.fstat(reused)  # still open: the second close() did not touch it
    finally:
        os.close(reused)
    assert memory.closed and memory.nbytes == 0 and memory.address == 0 and memory.fd == -1
    assert memory.export_fd() == -1
    with pytest.raises(ValueError, match="closed"):
        _ = memory.array


@pytest.mark.parametrize("kind", ["pageable", "locked", "shared"])
def test_views_outlive_close(kind: str) -> None:
    memory = getattr(HostMemory, kind)(4096)
    view = memory.array
    view[:] = np.arange(4096) % 251
    memory.close()
    np.testing.assert_array_equal(view, np.arange(4096) % 251)  # pages still mapped
    view[0] = 1


def test_shared_export_fd_is_a_new_fd_of_the_same_memory() -> None:
    with HostMemory.shared(8192) as memory:
        exported = memory.export_fd()
        try:
            assert exported not in (-1, memory.fd)
            assert os.fstat(exported).st_ino == os.fstat(memory.fd).st_ino
            os.pwrite(exported, b"copyless", 100)
            assert bytes(memory.array[100:108]) == b"copyless"
        finally:
            os.close(exported)


@pytest.mark.parametrize("kind", ["pageable", "locked"])
def test_unshareable_memory_exports_nothing(kind: str) -> None:
    with getattr(HostMemory, kind)(64) as memory:
        assert memory.fd == -1 and memory.export_fd() == -1


@pytest.mark.parametrize("size", [-1, 1.5, True, "10", None])
def test_bad_sizes(size: object) -> None:
    with pytest.raises(cl.TensorError, match="allocation size"):
        HostMemory.pageable(size)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["pageable", "locked", "shared"])
def test_leaked_owner_warns(kind: str) -> None:
    memory = getattr(HostMemory, kind)(100)
    fd = memory.fd
    identity = _identity(fd) if fd >= 0 else (0, 0)
    with pytest.warns(ResourceWarning, match=f"unclosed <HostMemory {kind}"):
        del memory
        gc.collect()
    if fd >= 0:
        assert _released(fd, identity)  # the finalizer released the fd too


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _released(fd: int, identity: tuple[int, int]) -> bool:
    """Whether ``fd`` no longer names the file it named (closed, or closed and its number
    taken since by a file another thread opened: a bare ``fstat`` raising would be flaky)."""
    try:
        return _identity(fd) != identity
    except OSError:
        return True


@pytest.mark.parametrize("warn_on_leak", [False, True])
def test_no_warning_when_closed_or_not_asked(warn_on_leak: bool) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        memory = HostMemory.shared(100, warn_on_leak=warn_on_leak)
        fd = memory.fd
        identity = _identity(fd)
        if warn_on_leak:
            memory.close()
        del memory
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert _released(fd, identity)


def test_repr_says_state() -> None:
    memory = HostMemory.pageable(16)
    assert "16 bytes" in repr(memory)
    memory.close()
    assert repr(memory) == "<HostMemory pageable closed>"
