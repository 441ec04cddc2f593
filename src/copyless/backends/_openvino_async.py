"""The end of every native async OpenVINO run, failed ones included.

OpenVINO calls a request's callback (``InferRequest.set_callback``) only when the run
succeeds: when it fails, the binding raises on OpenVINO's thread, the callback never comes,
and the error waits in the request for a ``wait()`` nobody makes. A job would then stay
pending for ever. A :class:`FailureWatch` (one per engine) closes that gap: a context
registers each run it starts, and one thread (started with the engine's first run, asleep
while no run is in flight, joined when the engine closes) polls the
requests every :data:`PERIOD_S` with ``wait_for(0)``, which raises a failed run's error;
the context then reports that error instead of the callback. Successful runs never go
through it (their callback ends them), so it costs nothing on the hot path.
"""

from __future__ import annotations

import threading
from typing import Protocol

__all__ = ["PERIOD_S", "FailureWatch"]

PERIOD_S = 0.05


class Watched(Protocol):
    def check_failed(self) -> None:
        """Report the run's error if it failed; nothing otherwise."""


class FailureWatch:
    """The contexts of one engine with a run in flight, polled by one thread while there
    are any. :meth:`close` (the engine's) stops and joins that thread."""

    def __init__(self, period_s: float = PERIOD_S) -> None:
        self._period_s = period_s
        self._changed = threading.Condition()
        self._watched: set[Watched] = set()
        self._thread: threading.Thread | None = None
        self._closed = False

    def add(self, context: Watched) -> None:
        with self._changed:
            idle = not self._watched
            self._watched.add(context)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._loop, name="copyless-ov-watch", daemon=True
                )
                self._thread.start()
            if idle:  # wakes an idle watch only: a polling one keeps its period
                self._changed.notify_all()

    def discard(self, context: Watched) -> None:
        with self._changed:
            self._watched.discard(context)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._watched.clear()
            thread, self._thread = self._thread, None
            self._changed.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _loop(self) -> None:
        while True:
            with self._changed:
                # idle (no run in flight): sleeps until a run starts or the engine closes
                self._changed.wait_for(lambda: self._watched or self._closed)
                if not self._closed:
                    self._changed.wait(self._period_s)
                if self._closed:
                    return
                current = list(self._watched)
            for context in current:
                context.check_failed()
