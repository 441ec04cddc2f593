"""Owned host memory: pageable, page-aligned locked, and fd-backed shareable.

Allocation is separate from views: a :class:`HostMemory` owns bytes and hands out numpy
views (:attr:`HostMemory.array`) that share them; :class:`~copyless.memory._tensor.NpuTensor`
is one such view with tensor metadata. Every owner closes deterministically with
:meth:`HostMemory.close` or a ``with`` block; a ``weakref.finalize`` releases what was
forgotten (with a ``ResourceWarning`` when the owner asked for one).

Ownership rule for mappings: numpy views keep the underlying ``mmap`` object alive, so
``close()`` never invalidates a view someone still holds; the pages go when the last view
goes. The file descriptor of fd-backed memory is closed by ``close()`` at once (the mapping
does not need it). Python's ``mmap`` keeps a private duplicate of the fd it maps, so a
mapping that outlives ``close()`` through a live view holds one descriptor until that view
goes; leak checks must drop views before counting ``/proc/self/fd``.

Nothing here copies bytes: every constructor maps or allocates, every accessor is a view.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import logging
import mmap
import os
import stat
import warnings
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from ..types import OutOfMemoryError, TensorError
from . import _dmabuf as dmabuf
from . import _seals as seals

logger = logging.getLogger(__name__)

PAGE_SIZE = mmap.PAGESIZE

_libc: Any = None


def _get_libc() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def _mlock(address: int, size: int) -> int:
    """``mlock(2)`` the range; 0 on success, else the errno (EPERM, ENOMEM, ...)."""
    if _get_libc().mlock(ctypes.c_void_p(address), ctypes.c_size_t(size)) == 0:
        return 0
    return ctypes.get_errno() or 1


def _munlock(address: int, size: int) -> None:
    _get_libc().munlock(ctypes.c_void_p(address), ctypes.c_size_t(size))


def round_up(nbytes: int, multiple: int = PAGE_SIZE) -> int:
    """``nbytes`` rounded up to a multiple of ``multiple`` (at least one multiple)."""
    return max(multiple, -(-nbytes // multiple) * multiple)


def _release(
    mapping: mmap.mmap | None, fd: int, locked: tuple[int, int] | None, warn: str | None
) -> None:
    # Module level and free of `self` so the finalizer never keeps its owner alive.
    if warn is not None:
        warnings.warn(warn, ResourceWarning, stacklevel=2)
    if locked is not None:
        _munlock(*locked)
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
    if mapping is not None:
        # Views may still export the mapping; it is then unmapped when the last one goes.
        with contextlib.suppress(BufferError):
            mapping.close()


def mappable_size(fd: int, min_bytes: int = 0) -> int:
    """Bytes behind a shareable ``fd`` after checking it can be mapped read-write, shared.

    Regular files and memfds report ``st_size``; dma-buf fds report 0 there and are sized
    with ``lseek(fd, 0, SEEK_END)`` (the file offset is restored). Raises
    :class:`TensorError` naming the fd and the numbers for a closed fd, a pipe, socket or
    directory, a fd not open read-write, a memfd not sealed against resizing (see
    :mod:`._seals`), or fewer than ``min_bytes`` bytes.
    """
    if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
        raise TensorError(f"expected a file descriptor (int >= 0), got {fd!r}")
    try:
        info = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError as exc:
        raise TensorError(f"fd {fd} is not an open file descriptor: {exc.strerror}") from exc
    mode = info.st_mode
    for test, what in (
        (stat.S_ISFIFO, "a pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            raise TensorError(f"fd {fd} is {what}, not mappable memory (memfd, /dev/shm, dma-buf)")
    access = flags & os.O_ACCMODE
    if access != os.O_RDWR:
        opened = "O_RDONLY" if access == os.O_RDONLY else "O_WRONLY"
        raise TensorError(f"fd {fd} is open {opened}; a shared mapping needs O_RDWR")
    seals.check_sealed(fd)
    size = int(info.st_size)
    if size == 0:  # dma-buf reports no st_size; its size is where SEEK_END lands
        size = _seek_size(fd)
    needed = max(min_bytes, 1)
    if size < needed:
        raise TensorError(f"fd {fd} holds {size} bytes, fewer than the {needed} bytes needed")
    return size


def _seek_size(fd: int) -> int:
    try:
        here = os.lseek(fd, 0, os.SEEK_CUR)
        end = os.lseek(fd, 0, os.SEEK_END)
        os.lseek(fd, here, os.SEEK_SET)
    except OSError as exc:
        raise TensorError(f"fd {fd} has no size (lseek: {exc.strerror})") from exc
    return end


class HostMemory:
    """A region of host memory that this object owns (or maps).

    Build with :meth:`pageable`, :meth:`locked`, :meth:`shared` or :meth:`from_fd`.
    ``array`` is a flat ``uint8`` view of the whole region; ``address`` its first byte;
    ``fd`` the descriptor for fd-backed memory (``-1`` otherwise).
    """

    __slots__ = (
        "__weakref__",
        "_array",
        "_dmabuf",
        "_fd",
        "_finalizer",
        "_kind",
        "_lock_range",
        "_locked",
        "_mapping",
    )

    def __init__(
        self,
        kind: str,
        array: npt.NDArray[np.uint8],
        mapping: mmap.mmap | None,
        fd: int,
        locked: bool,
        warn_on_leak: bool,
    ) -> None:
        self._kind = kind
        self._array: npt.NDArray[np.uint8] | None = array
        self._mapping = mapping
        self._fd = fd
        self._locked = locked
        self._dmabuf = fd >= 0 and kind == "fd" and dmabuf.is_dmabuf(fd)
        lock_range = (self.address, array.nbytes) if locked else None
        self._lock_range = lock_range
        message = f"unclosed {self!r}" if warn_on_leak else None
        self._finalizer = weakref.finalize(self, _release, mapping, fd, lock_range, message)

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def pageable(cls, nbytes: int, *, warn_on_leak: bool = True) -> HostMemory:
        """Ordinary pageable memory (numpy's allocator): USER_POINTER_NON_CMA."""
        _check_size(nbytes)
        try:
            array = np.zeros(nbytes, dtype=np.uint8)
        except MemoryError as exc:
            raise OutOfMemoryError(nbytes, "numpy allocation failed") from exc
        return cls("pageable", array, None, -1, False, warn_on_leak)

    @classmethod
    def locked(cls, nbytes: int, *, warn_on_leak: bool = True) -> HostMemory:
        """Page-aligned memory locked in RAM with ``mlock``: USER_POINTER_CMA.

        Where RLIMIT_MEMLOCK forbids locking, the memory stays page-aligned but pageable
        and a warning is logged (``is_locked`` tells which you got).
        """
        _check_size(nbytes)
        size = round_up(nbytes)
        try:
            mapping = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError as exc:
            raise OutOfMemoryError(size, f"anonymous mmap failed: {exc.strerror}") from exc
        array = np.frombuffer(mapping, dtype=np.uint8)
        address = int(array.__array_interface__["data"][0])
        err = _mlock(address, size)
        locked = err == 0
        if not locked:
            # Not silent: the caller asked for locked memory; is_locked tells what it got.
            logger.warning(
                "mlock of %d bytes refused (%s; see RLIMIT_MEMLOCK / CAP_IPC_LOCK); "
                "using page-aligned pageable memory instead",
                size,
                os.strerror(err),
            )
        # Lock range covers the whole mapping; the view is trimmed to what was asked.
        memory = cls("locked", array, mapping, -1, locked, warn_on_leak)
        memory._array = array[:nbytes]
        return memory

    @classmethod
    def shared(
        cls, nbytes: int, name: str = "copyless", *, warn_on_leak: bool = True
    ) -> HostMemory:
        """Anonymous shareable memory (``memfd``): exportable as a file descriptor.

        The memfd is sealed against shrinking and growing (and against further seals), so
        no process it is shared with can truncate it under another's mapping (SIGBUS).
        """
        _check_size(nbytes)
        size = round_up(nbytes)
        try:
            fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError as exc:
            raise OutOfMemoryError(size, f"memfd_create failed: {exc.strerror}") from exc
        try:
            os.ftruncate(fd, size)
            seals.seal_size(fd)
            mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        except OSError as exc:
            os.close(fd)
            raise OutOfMemoryError(size, f"memfd sizing/mapping failed: {exc.strerror}") from exc
        array = np.frombuffer(mapping, dtype=np.uint8)[:nbytes]
        return cls("shared", array, mapping, fd, False, warn_on_leak)

    @classmethod
    def from_fd(
        cls,
        fd: int,
        min_bytes: int = 0,
        *,
        own_fd: bool = False,
        dup: bool = False,
        warn_on_leak: bool = False,
        map_bytes: int | None = None,
    ) -> HostMemory:
        """Map a shareable fd (memfd, /dev/shm file, dma-buf) read-write, shared (no copy).

        The whole object is mapped, or only its first ``map_bytes`` (a tensor maps what its
        info covers: bytes a peer left beyond it are never touched). A memfd must be sealed
        against resizing (see :mod:`._seals`). Who owns which descriptor:

        * default: the caller keeps ``fd``; this memory has no fd of its own (``fd == -1``).
        * ``dup=True``: this memory holds a private duplicate, closed by :meth:`close`, so
          it stays exportable whatever the caller later does with ``fd``.
        * ``own_fd=True``: this memory takes ``fd`` itself and closes it in :meth:`close`.

        Raises :class:`TensorError` (see :func:`mappable_size`) when the fd is closed, a
        pipe/socket, not open read-write, an unsealed memfd, not mappable, or smaller than
        ``min_bytes`` (or ``map_bytes``).
        """
        if own_fd and dup:
            raise TensorError("from_fd: own_fd and dup are exclusive")
        if map_bytes is not None:
            _check_size(map_bytes)
        size = mappable_size(fd, max(min_bytes, map_bytes or 0))
        wanted = size if map_bytes is None else map_bytes
        try:
            mapping = mmap.mmap(fd, max(wanted, 1), flags=mmap.MAP_SHARED)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise TensorError(f"fd {fd} of {size} bytes cannot be mapped: {reason}") from exc
        kept = fd if own_fd else -1
        if dup:
            try:
                kept = os.dup(fd)
            except OSError as exc:
                mapping.close()
                raise TensorError(f"fd {fd} cannot be duplicated: {exc.strerror}") from exc
        array = np.frombuffer(mapping, dtype=np.uint8)[:wanted]
        return cls("fd", array, mapping, kept, False, warn_on_leak)

    # -- accessors ----------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """``"pageable"``, ``"locked"``, ``"shared"`` or ``"fd"``."""
        return self._kind

    @property
    def closed(self) -> bool:
        return self._array is None

    @property
    def array(self) -> npt.NDArray[np.uint8]:
        """Flat uint8 view of the memory (no copy). Raises after close()."""
        if self._array is None:
            raise ValueError(f"{self._kind} memory is closed")
        return self._array

    @property
    def nbytes(self) -> int:
        return 0 if self._array is None else int(self._array.nbytes)

    @property
    def address(self) -> int:
        """Address of the first byte; 0 after close()."""
        if self._array is None:
            return 0
        return int(self._array.__array_interface__["data"][0])

    @property
    def fd(self) -> int:
        """The owned file descriptor of shared memory, -1 where there is none."""
        return self._fd if self._array is not None else -1

    @property
    def is_locked(self) -> bool:
        return self._locked

    @property
    def is_dmabuf(self) -> bool:
        """Whether the owned fd is a dma-buf (its CPU access needs syncs, see ._dmabuf)."""
        return self._dmabuf and self._array is not None

    def export_fd(self) -> int:
        """A NEW descriptor of this memory that the caller owns; -1 if not shareable."""
        if self._array is None or self._fd < 0:
            return -1
        return os.dup(self._fd)

    def close(self) -> None:
        """Release now: unlock, close the fd, unmap if no view is left (idempotent).

        Views handed out earlier stay valid (they keep the mapping alive); only the
        descriptor and the lock go at once.
        """
        if self._array is None:
            return
        self._array = None
        self._finalizer.detach()
        mapping, fd, lock_range = self._mapping, self._fd, self._lock_range
        self._mapping, self._fd, self._lock_range = None, -1, None
        _release(mapping, fd, lock_range, None)

    def __enter__(self) -> HostMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.nbytes} bytes at {self.address:#x}"
        return f"<HostMemory {self._kind} {state}>"


def _check_size(nbytes: int) -> None:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise TensorError(f"allocation size must be an int >= 0, got {nbytes!r}")
    # A sparse memfd and an overcommitted map accept any size and fail later, when touched
    # (SIGBUS or the OOM killer); refuse what this machine cannot hold at all, up front.
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if nbytes > physical:
        raise OutOfMemoryError(
            nbytes, f"more than this machine's {physical} bytes of physical memory"
        )
