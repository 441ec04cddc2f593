"""Where a pipeline's items come from: one iterable pulled in place, or many pulled side by
side.

A feed's :meth:`take` hands the pipeline's workers up to ``count`` items, each tagged with
its source and its 0-based index there (:class:`Pulled`); the workers call it one at a
time, so indices are dense and in order per source. An item whose source raised carries
the exception instead (``error``), and the source ends there, as a generator does.

* :class:`DirectFeed` (``Pipeline.map`` at batch 1): ``next()`` on the worker that takes
  the item: nothing is pulled before a slot is free.
* :class:`SourceFeed` (``map_sources``, and ``map`` at batch > 1): a reader thread per source
  pulls into a small bounded queue, so that a slow source (a camera) never holds up a fast
  one, and a batch can be assembled from what is ready, round robin, waiting at most
  ``wait_s`` for a fuller one.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ._stats import StageClock

#: How often a blocked wait looks at the stop flag, seconds.
POLL_S = 0.1


@dataclass(slots=True)
class Pulled:
    """One item as it left its source (``pulled_at``: time.perf_counter())."""

    source: Any
    index: int
    item: Any
    error: BaseException | None
    pulled_at: float


class Feed(Protocol):
    def take(self, count: int, wait_s: float, stop: threading.Event) -> list[Pulled] | None:
        """Up to ``count`` items (at least one), or None once every source has ended or
        ``stop`` is set."""

    def close(self, timeout_s: float) -> None:
        """Stop pulling and release the threads (bounded wait)."""


def _pull(iterator: Iterator[Any], source: Any, index: int, clock: StageClock) -> Pulled | None:
    """The next item of ``iterator`` as a :class:`Pulled`, None at its end."""
    t0 = time.perf_counter()
    try:
        item = next(iterator)
    except StopIteration:
        return None
    except Exception as exc:  # noqa: BLE001 - the item's error, reported in its Result
        return Pulled(source, index, None, exc, time.perf_counter())
    t1 = time.perf_counter()
    clock.add("source", t1 - t0)
    return Pulled(source, index, item, None, t1)


class DirectFeed:
    """One iterable, pulled on the taking worker's thread."""

    def __init__(self, iterator: Iterator[Any], clock: StageClock, source: Any = None) -> None:
        self._iterator = iterator
        self._clock = clock
        self._source = source
        self._index = 0
        self._ended = False

    def take(self, count: int, wait_s: float, stop: threading.Event) -> list[Pulled] | None:
        got: list[Pulled] = []
        while len(got) < count and not self._ended and not stop.is_set():
            pulled = _pull(self._iterator, self._source, self._index, self._clock)
            if pulled is None or pulled.error is not None:
                self._ended = True
            if pulled is not None:
                got.append(pulled)
                self._index += 1
        return got or None

    def close(self, timeout_s: float) -> None:
        self._ended = True


class _SourceReader:
    """A source's thread and queue (the queue is guarded by the feed's lock)."""

    __slots__ = ("ended", "iterator", "key", "pulled", "queue", "room", "thread")

    def __init__(self, key: Any, iterator: Iterator[Any], room: threading.Condition) -> None:
        self.key = key
        self.iterator = iterator
        self.room = room  # an item taken from this queue (the feed's lock)
        self.queue: collections.deque[Pulled] = collections.deque()
        self.ended = False
        self.pulled = 0
        self.thread: threading.Thread | None = None


class SourceFeed:
    """Many sources, each pulled by its own thread into a queue of ``depth`` items. One lock;
    the takers wait on ``_ready`` (an item queued, a source ended), each reader on its own
    ``room``: an item wakes the takers, a take wakes only the readers it took from."""

    def __init__(
        self, sources: Mapping[Any, Iterator[Any]], depth: int, clock: StageClock
    ) -> None:
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._depth = max(1, depth)
        self._clock = clock
        self._readers = [
            _SourceReader(key, iterator, threading.Condition(self._lock))
            for key, iterator in sources.items()
        ]
        self._next = 0  # round robin: the reader asked first
        self._stopping = False
        for number, reader in enumerate(self._readers):
            reader.thread = threading.Thread(
                target=self._read, args=(reader,), daemon=True,
                name=f"copyless-source-{number}",
            )  # fmt: skip
            reader.thread.start()

    def _read(self, reader: _SourceReader) -> None:
        while True:
            with self._lock:
                while len(reader.queue) >= self._depth and not self._stopping:
                    reader.room.wait(POLL_S)
                if self._stopping:
                    break
            pulled = _pull(reader.iterator, reader.key, reader.pulled, self._clock)
            with self._lock:
                if pulled is not None:
                    reader.queue.append(pulled)
                    reader.pulled += 1
                if pulled is None or pulled.error is not None:
                    break
                self._ready.notify_all()
        with self._lock:
            reader.ended = True
            self._ready.notify_all()

    def _round(self, count: int) -> list[Pulled]:
        """Up to ``count`` ready items, one per source per pass, round robin; wakes the
        readers it took from (their queues have room)."""
        got: list[Pulled] = []
        readers, n = self._readers, len(self._readers)
        while len(got) < count:
            took = False
            for step in range(n):
                at = (self._next + step) % n
                if readers[at].queue:
                    got.append(readers[at].queue.popleft())
                    readers[at].room.notify_all()
                    took = True
                    if len(got) == count:
                        break
            if took:
                self._next = (at + 1) % n
            if not took or len(got) == count:
                break
        return got

    def _drained(self) -> bool:
        return all(r.ended and not r.queue for r in self._readers)

    def take(self, count: int, wait_s: float, stop: threading.Event) -> list[Pulled] | None:
        with self._lock:
            got = self._round(count)
            while not got and not stop.is_set() and not self._drained():
                self._ready.wait(POLL_S)
                got = self._round(count)
            if got and len(got) < count and wait_s > 0:
                deadline = time.perf_counter() + wait_s
                while len(got) < count and not stop.is_set() and not self._drained():
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                    self._ready.wait(min(left, POLL_S))
                    got += self._round(count - len(got))
            return got or None

    def close(self, timeout_s: float) -> None:
        with self._lock:
            self._stopping = True
            self._ready.notify_all()
            for reader in self._readers:
                reader.room.notify_all()
        deadline = time.perf_counter() + timeout_s
        for reader in self._readers:
            if reader.thread is not None:
                # a reader inside a source's next() cannot be interrupted: it is a daemon
                # thread and ends when that call returns
                reader.thread.join(max(0.0, deadline - time.perf_counter()))
        with self._lock:
            for reader in self._readers:
                reader.queue.clear()
