"""What a server holds for its clients, within budgets that always leave it room to answer.

*Descriptors.* Every connection and every shared-memory region holds a file descriptor; a
process out of descriptors can accept nothing, not even a health check. At start the server
raises its soft ``RLIMIT_NOFILE`` to the hard limit, keeps a reserve (an eighth, at least 64:
engine files, health checks, new connections, logs) and splits the rest: a quarter for
regions (at most :data:`~._regions.MAX_REGIONS`), the remainder between the REST and gRPC
listeners' connections. A registration is also refused while the process's open descriptors
reach into the reserve, whatever holds them.

*Bytes.* Requests being read, parsed or queued hold their bytes; :class:`ByteBudget` bounds
their sum, so a burst of large requests is refused (503 / RESOURCE_EXHAUSTED) instead of
growing the process without bound.

Refusals are logged through :class:`Throttled`: one line per reason and interval, with the
count of the ones it held back.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "ByteBudget",
    "DescriptorBudget",
    "Throttled",
    "fd_limit",
    "open_descriptors",
    "raise_fd_limit",
]

#: Descriptors kept free at least, whatever the limit.
RESERVE_MIN = 64
#: The soft limit asked for where the hard one is unlimited.
_UNLIMITED_AS = 1 << 20


def fd_limit() -> int:
    """The soft descriptor limit in force."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _UNLIMITED_AS if soft == resource.RLIM_INFINITY else soft


def raise_fd_limit() -> int:
    """Raise the soft descriptor limit to the hard one; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _UNLIMITED_AS if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):  # not ours to raise: keep the soft one
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return fd_limit()


#: Requests at least this large give their memory back to the system when they end,
#: this many seconds after (a 95 MB gRPC request on a loaded 2-core machine once kept
#: 198 MB past the 1 s give-back: its buffers went later).
TRIM_BYTES = 16 << 20
TRIM_AFTER_S = (0.1, 1.0, 3.0, 6.0)


def _libc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_malloc_trim = _libc_trim()


def give_back_memory() -> None:
    """Free what a large request left and return the heap's free pages to the system: an
    aborted gRPC call's exception keeps its frames, hence its message, in a reference cycle
    until the collector runs; glibc keeps freed pages of gRPC's and the parsers' arenas
    unless trimmed (``malloc_trim``)."""
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)


def open_descriptors() -> int:
    """Descriptors this process has open now."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


@dataclass(frozen=True, slots=True)
class DescriptorBudget:
    """``limit``: the soft limit; ``reserve``: kept free; ``regions``: shared-memory
    regions at most; ``connections``: connections per listener at most."""

    limit: int
    reserve: int
    regions: int
    connections: int

    @classmethod
    def of(cls, limit: int, max_regions: int) -> DescriptorBudget:
        reserve = max(RESERVE_MIN, limit // 8)
        usable = max(0, limit - reserve)
        regions = min(max_regions, usable // 4)
        return cls(limit, reserve, regions, max(1, (usable - regions) // 2))

    def room(self) -> bool:
        """Whether one more descriptor can be taken for a client without eating the
        reserve."""
        return open_descriptors() < self.limit - self.reserve


class ByteBudget:
    """At most ``capacity`` bytes held at once (thread-safe; 0: no bound)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return self._held

    def take(self, nbytes: int) -> bool:
        """Hold ``nbytes`` if they fit; False (nothing held) if not."""
        with self._lock:
            if self.capacity and self._held + nbytes > self.capacity:
                return False
            self._held += nbytes
            return True

    def give(self, nbytes: int) -> None:
        with self._lock:
            self._held = max(0, self._held - nbytes)


class Throttled:
    """A logger's warnings, at most one line per ``key`` every ``interval_s``; the next line
    says how many were held back."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self._logger, self._interval = logger, interval_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def warning(self, key: str, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -self._interval) < self._interval:
                self._held[key] = self._held.get(key, 0) + 1
                return
            self._last[key] = now
            held = self._held.pop(key, 0)
        suffix = f" ({held} more in the last {self._interval:g} s)" if held else ""
        self._logger.warning("%s%s", message, suffix)
