"""The system shared-memory extension: regions a client on this host registered by name.

A client creates a POSIX shared-memory object (``shm_open``: a file under ``/dev/shm``),
registers ``(name, key, offset, byte_size)`` and then names the region in its requests
instead of sending tensor bytes. The server opens the key under ``/dev/shm`` only (a plain
name: no other directory, no ``..``, no symbolic link, a regular file) and checks every
range against the registration and the file.

Such a file cannot be sealed, and its owner may truncate it at any time: a server that
mapped it would die of SIGBUS on the next touch past the new end. So the server never maps
a region: it reads a row straight into the pipeline's input tensor with ``preadv`` and
writes an output row into the region with ``pwritev`` (one copy each way, the one the
pipeline's batching makes anyway), and a region that shrank under a request is that
request's error, nothing more. Descriptors are counted: a region unregistered while
requests use it is closed when the last of them ends, and those requests fail with an
error saying so (no byte of theirs is written after the unregister).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
from collections.abc import Iterator
from typing import Any

from ._errors import Refusal, RequestError

__all__ = ["MAX_REGIONS", "SHM_ROOT", "RegionTable", "SharedRegion"]

SHM_ROOT = "/dev/shm"
#: Regions registered at once, at most (each holds one descriptor).
MAX_REGIONS = 1024
_KEY = re.compile(r"/?([^/\x00]{1,255})")
_NAME_MAX = 256


class SharedRegion:
    """One registered region: its descriptor, counted by the requests using it."""

    def __init__(self, name: str, key: str, offset: int, byte_size: int, fd: int) -> None:
        self.name, self.key, self.offset, self.byte_size = name, key, offset, byte_size
        self._fd = fd
        self._users = 0
        self._registered = True
        self._lock = threading.Lock()

    @property
    def registered(self) -> bool:
        return self._registered

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}  # fmt: skip

    def check_range(self, offset: int, size: int, what: str) -> None:
        """``[offset, offset + size)`` of the region (offsets relative to it) or refuse."""
        if offset < 0 or size < 0 or offset + size > self.byte_size:
            raise RequestError.invalid(
                f"{what}: {size} bytes at offset {offset} of shared memory region "
                f"{self.name!r} lie outside its {self.byte_size} bytes"
            )

    def acquire(self) -> SharedRegion:
        with self._lock:
            if not self._registered:
                raise RequestError.not_found(f"shared memory region {self.name!r} is not "
                                             "registered")
            self._users += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0 and not self._registered
        if last:
            self._close()

    def unregister(self) -> None:
        with self._lock:
            self._registered = False
            idle = self._users == 0
        if idle:
            self._close()

    def _close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def _still(self, what: str) -> None:
        if not self._registered:
            raise RequestError.invalid(f"{what}: shared memory region {self.name!r} was "
                                     "unregistered while the request was in flight")  # fmt: skip

    def read_into(self, buffer: memoryview, offset: int, what: str) -> None:
        """Fill ``buffer`` from the region's ``offset`` (one copy, no mapping)."""
        self._still(what)
        done, where, size = 0, self.offset + offset, buffer.nbytes
        while done < size:
            got = os.preadv(self._fd, [buffer[done:]], where + done)
            if got <= 0:
                raise RequestError.invalid(
                    f"{what}: shared memory region {self.name!r} ({self.key}) ends before "
                    f"the {size} bytes at offset {offset}: it was truncated by its owner"
                )
            done += got

    def write_from(self, buffer: memoryview, offset: int, what: str) -> None:
        """Write ``buffer`` at the region's ``offset``; a region its owner shrank is an
        error (the file is not grown back)."""
        self._still(what)
        where, size = self.offset + offset, buffer.nbytes
        if os.fstat(self._fd).st_size < where + size:
            raise RequestError.invalid(
                f"{what}: shared memory region {self.name!r} ({self.key}) no longer holds "
                f"{size} bytes at offset {offset}: it was truncated by its owner"
            )
        done = 0
        while done < size:
            done += os.pwritev(self._fd, [buffer[done:]], where + done)


class RegionTable:
    """The server's registered regions, by name (thread-safe)."""

    def __init__(self, root: str = SHM_ROOT, limit: int = MAX_REGIONS) -> None:
        self._root, self._limit = root, limit
        self._regions: dict[str, SharedRegion] = {}
        self._lock = threading.Lock()

    def register(self, name: str, key: object, offset: object, byte_size: object) -> None:
        """Open ``key`` under /dev/shm and register ``byte_size`` bytes of it at ``offset``
        as ``name`` (values as a request carried them: checked here)."""
        if not isinstance(name, str) or not 0 < len(name) <= _NAME_MAX:
            raise RequestError.invalid(f"a region name is 1 to {_NAME_MAX} characters, "
                                       f"got {name!r}")
        for label, value in (("offset", offset), ("byte_size", byte_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise RequestError.invalid(f"region {name!r}: {label} must be an integer >= 0, "
                                         f"got {value!r}")  # fmt: skip
        if not isinstance(offset, int) or not isinstance(byte_size, int) or byte_size == 0:
            raise RequestError.invalid(f"region {name!r}: byte_size must be > 0")
        fd, key = self._open(name, key)
        try:
            size = os.fstat(fd).st_size
            if offset + byte_size > size:
                raise RequestError.invalid(
                    f"region {name!r}: {byte_size} bytes at offset {offset} lie outside "
                    f"{key!r} ({size} bytes)"
                )
            with self._lock:
                if name in self._regions:
                    raise RequestError(Refusal.ALREADY_EXISTS,
                                     f"shared memory region {name!r} is already registered")
                if len(self._regions) >= self._limit:
                    raise RequestError(Refusal.EXHAUSTED, f"{self._limit} shared memory regions "
                                     "are registered already: unregister some first")
                self._regions[name] = SharedRegion(name, key, offset, byte_size, fd)
        except BaseException:
            os.close(fd)
            raise

    def _open(self, name: str, key: object) -> tuple[int, str]:
        match = _KEY.fullmatch(key) if isinstance(key, str) else None
        if not isinstance(key, str) or match is None or match.group(1) in (".", ".."):
            raise RequestError.invalid(
                f"region {name!r}: key {key!r} is not the name of a shared memory object "
                f"(a name under {self._root}, such as '/my_region')"
            )
        path = os.path.join(self._root, match.group(1))
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise RequestError.invalid(f"region {name!r}: cannot open {path}: "
                                     f"{exc.strerror}") from None  # fmt: skip
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RequestError.invalid(f"region {name!r}: {path} is not a shared memory object")
        return fd, key

    def status(self, name: str = "") -> list[dict[str, Any]]:
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values()]
            region = self._regions.get(name)
        if region is None:
            raise RequestError.not_found(f"no shared memory region {name!r} is registered")
        return [region.status()]

    def unregister(self, name: str = "") -> None:
        """One region, or every one with ``name=""``; an unknown name is no error (as in
        Triton: unregistering is idempotent)."""
        with self._lock:
            if name:
                gone = [self._regions.pop(name)] if name in self._regions else []
            else:
                gone, self._regions = list(self._regions.values()), {}
        for region in gone:
            region.unregister()

    def acquire(self, name: str) -> SharedRegion:
        """The region ``name``, counted as used until :meth:`SharedRegion.release`."""
        with self._lock:
            region = self._regions.get(name)
        if region is None:
            raise RequestError.not_found(f"no shared memory region {name!r} is registered")
        return region.acquire()

    def __len__(self) -> int:
        with self._lock:
            return len(self._regions)

    def close(self) -> None:
        self.unregister()

    @contextlib.contextmanager
    def using(self, name: str) -> Iterator[SharedRegion]:
        region = self.acquire(name)
        try:
            yield region
        finally:
            region.release()
