"""The system shared-memory extension: regions a client on this host registered by name.

A client creates a POSIX shared-memory object (``shm_open``: a file under ``/dev/shm``),
registers ``(name, key, offset, byte_size)`` and then names the region in its requests
instead of sending tensor bytes. The server opens the key under ``/dev/shm`` only (a plain
name: no other directory, no ``..``, no symbolic link, a regular file the client may open
itself: :mod:`._access`) and checks every range against the registration and the file.
Regions belong to the client that registered them: each client sees, uses and unregisters
its own (:attr:`~._access.Client.owner`), and two clients may use the same region name.

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

import logging
import os
import re
import threading
from typing import Any

from ._access import Client, check_object
from ._budget import DescriptorBudget, Throttled
from ._errors import Refusal, RequestError

__all__ = ["MAX_REGIONS", "SHM_ROOT", "RegionTable", "SharedRegion"]

SHM_ROOT = "/dev/shm"
#: Regions registered at once, at most (each holds one descriptor).
MAX_REGIONS = 1024
_KEY = re.compile(r"/?([^/\x00]{1,255})")
_NAME_MAX = 256
_throttled = Throttled(logging.getLogger(__name__))


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
    """The server's registered regions, by owner and name (thread-safe). ``budget``: the
    server's descriptor budget (its ``regions`` is the cap; a registration is refused while
    the process's descriptors reach into its reserve); None: :data:`MAX_REGIONS`."""

    def __init__(self, root: str = SHM_ROOT, budget: DescriptorBudget | None = None) -> None:
        self._root, self._budget = root, budget
        self._limit = budget.regions if budget is not None else MAX_REGIONS
        self._regions: dict[tuple[str, str], SharedRegion] = {}
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        return self._limit

    def register(self, client: Client, name: str, key: object, offset: object,
                 byte_size: object) -> None:  # fmt: skip
        """Open ``key`` under /dev/shm and register ``byte_size`` bytes of it at ``offset``
        as ``client``'s region ``name`` (values as a request carried them: checked here)."""
        if not isinstance(name, str) or not 0 < len(name) <= _NAME_MAX:
            raise RequestError.invalid(f"a region name is 1 to {_NAME_MAX} characters, "
                                       f"got {name!r}")
        for label, value in (("offset", offset), ("byte_size", byte_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise RequestError.invalid(f"region {name!r}: {label} must be an integer >= 0, "
                                         f"got {value!r}")  # fmt: skip
        if not isinstance(offset, int) or not isinstance(byte_size, int) or byte_size == 0:
            raise RequestError.invalid(f"region {name!r}: byte_size must be > 0")
        self._check_room(client)
        fd, key, size = self._open(client, name, key)
        try:
            if offset + byte_size > size:
                raise RequestError.invalid(
                    f"region {name!r}: {byte_size} bytes at offset {offset} lie outside "
                    f"{key!r} ({size} bytes)"
                )
            with self._lock:
                if (client.owner, name) in self._regions:
                    raise RequestError(Refusal.ALREADY_EXISTS,
                                     f"shared memory region {name!r} is already registered")
                if len(self._regions) >= self._limit:
                    raise self._full()
                self._regions[(client.owner, name)] = SharedRegion(name, key, offset,
                                                                   byte_size, fd)  # fmt: skip
        except BaseException:
            os.close(fd)
            raise

    def _full(self) -> RequestError:
        _throttled.warning("regions", f"shared memory registration refused: {self._limit} "
                           "regions are registered (the descriptor budget's share)")
        return RequestError(Refusal.EXHAUSTED, f"{self._limit} shared memory regions are "
                            "registered on this server: unregister some first")  # fmt: skip

    def _check_room(self, client: Client) -> None:
        if self._budget is not None and not self._budget.room():
            _throttled.warning("descriptors", "shared memory registration refused: the "
                               "process's open descriptors reach into the reserve kept for "
                               "health checks and new connections")  # fmt: skip
            raise RequestError(Refusal.EXHAUSTED, "the server has no file descriptor to "
                               "spare for another region now: retry later")  # fmt: skip

    def _open(self, client: Client, name: str, key: object) -> tuple[int, str, int]:
        match = _KEY.fullmatch(key) if isinstance(key, str) else None
        if not isinstance(key, str) or match is None or match.group(1) in (".", ".."):
            raise RequestError.invalid(
                f"region {name!r}: key {key!r} is not the name of a shared memory object "
                f"(a name under {self._root}, such as '/my_region')"
            )
        # One answer for a missing object, a directory, a link, a FIFO or another user's
        # object: nothing tells a client what it could not open itself.
        refused = RequestError.invalid(f"region {name!r}: no shared memory object {key!r} "
                                       "that this client may open")  # fmt: skip
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        try:
            fd = os.open(os.path.join(self._root, match.group(1)), flags)
        except OSError:
            raise refused from None
        info = check_object(fd, client)
        if info is None:
            os.close(fd)
            raise refused
        return fd, key, info.st_size

    def status(self, client: Client, name: str = "") -> list[dict[str, Any]]:
        """``client``'s regions (or its region ``name``)."""
        with self._lock:
            if not name:
                return [r.status() for (owner, _), r in self._regions.items()
                        if owner == client.owner]  # fmt: skip
            region = self._regions.get((client.owner, name))
        if region is None:
            raise RequestError.not_found(f"no shared memory region {name!r} is registered")
        return [region.status()]

    def unregister(self, client: Client | None, name: str = "") -> None:
        """``client``'s region ``name``, or all its regions with ``name=""`` (every region
        of every client with ``client=None``); an unknown name is no error (as in Triton:
        unregistering is idempotent)."""
        with self._lock:
            if client is None:
                gone, self._regions = list(self._regions.values()), {}
            elif name:
                region = self._regions.pop((client.owner, name), None)
                gone = [region] if region is not None else []
            else:
                keys = [k for k in self._regions if k[0] == client.owner]
                gone = [self._regions.pop(k) for k in keys]
        for region in gone:
            region.unregister()

    def acquire(self, client: Client, name: str) -> SharedRegion:
        """``client``'s region ``name``, counted as used until :meth:`SharedRegion.release`."""
        with self._lock:
            region = self._regions.get((client.owner, name))
        if region is None:
            raise RequestError.not_found(f"no shared memory region {name!r} is registered")
        return region.acquire()

    def __len__(self) -> int:
        with self._lock:
            return len(self._regions)

    def close(self) -> None:
        self.unregister(None)
