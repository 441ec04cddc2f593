"""One :class:`~copyless.Pipeline` per Predictor actor, fed by every call it gets.

Ray Data calls an actor once per batch; with ``max_concurrent_calls_per_actor=2`` (and true
multi-threading) a second call arrives while the first is still running. Both put their rows
on one queue that a single, long-lived ``pipeline.map`` pulls from, so the engine never
drains between calls: the next batch's rows are prepared (decoded) while this batch's last
jobs run, and a batch's tail shares a job with the next batch's head instead of running as
a short job. A consumer thread takes the results in order and settles each row with its
:class:`Call`; the call returns once every row of its batch is in.

``prepare`` writes one row into its row of the pipeline's batch tensor (decoding an image
there, or copying a frame of a ``pixels`` column there); ``finish`` writes the row's outputs
(or its top-k classes) into the call's result arrays. Both run on the pipeline's worker
threads, overlapped with the engine.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..pipeline import ItemTensors, Pipeline, Result
from ..runner import Runner

logger = logging.getLogger(__name__)

#: How long a job waits for a fuller batch (the next call's rows) once it has a row.
BATCH_WAIT_MS = 50.0
#: How often a blocked wait looks whether the stream was closed, seconds.
POLL_S = 0.1
_END = object()


class RowError(Exception):
    """A row that could not be prepared (an unreadable image): its ``error`` message."""


@dataclass(eq=False, slots=True)
class Item:
    """One row of a call: ``source`` is the frame (a ``pixels`` row) or the image path."""

    call: Call
    index: int
    source: Any


class Call:
    """One batch's rows in flight; ``arrays`` are where ``finish`` writes their results
    (their top-k classes when ``classify``, else the model's outputs).

    ``errors`` maps a row to its :class:`RowError` message; ``failure`` is the first other
    error (the runner's status, a bug in ``finish``), which fails the whole batch.
    """

    def __init__(self, arrays: dict[str, npt.NDArray[Any]], classify: bool = False) -> None:
        self.arrays = arrays
        self.classify = classify
        self.errors: dict[int, str] = {}
        self.failure: BaseException | None = None
        self._left = 0
        self._lock = threading.Lock()
        self.done = threading.Event()

    def expect(self, rows: int) -> None:
        """The number of rows queued for this call (before any is settled)."""
        self._left = rows
        if rows == 0:
            self.done.set()

    def settle(self, index: int, error: BaseException | None) -> None:
        with self._lock:
            if isinstance(error, RowError):
                self.errors[index] = str(error)
            elif error is not None and self.failure is None:
                self.failure = error
            self._left -= 1
            if self._left == 0:
                self.done.set()

    def fail(self, error: BaseException) -> None:
        """The stream itself ended: fail what is still out."""
        with self._lock:
            if self.failure is None:
                self.failure = error
            self.done.set()


class FrameCounts:
    """Rows per kind of job, counted in ``prepare`` (thread-safe): a row prepared into the
    last row of a job makes a full job, bound in place; the others ran in short jobs."""

    def __init__(self, batch: int) -> None:
        self._batch = batch
        self._lock = threading.Lock()
        self.prepared = 0
        self.full_jobs = 0
        self.copied = 0

    def row(self, position: int, copied: bool) -> None:
        with self._lock:
            self.prepared += 1
            self.copied += copied
            self.full_jobs += position == self._batch - 1

    @property
    def in_place(self) -> int:
        return self.full_jobs * self._batch

    @property
    def gathered(self) -> int:
        return self.prepared - self.in_place


class PredictionStream:
    """A pipeline over ``runner`` and the thread that runs it for every :meth:`run` call."""

    def __init__(
        self,
        runner: Runner,
        prepare: Callable[[Item, ItemTensors], None],
        finish: Callable[[Item, ItemTensors], None],
        *,
        slots: int,
    ) -> None:
        self._pipeline = Pipeline(
            runner,
            prepare,
            finish,
            slots=slots,
            batch=runner.get_batch_size(),
            batch_wait_ms=BATCH_WAIT_MS,
        )
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._open: set[Call] = set()
        self._thread: threading.Thread | None = None
        self._closed = False

    def run(self, call: Call, sources: Iterator[tuple[int, Any]]) -> None:
        """Queue the call's rows (``(index, source)``) and wait until every one is in."""
        items = [Item(call, index, source) for index, source in sources]
        call.expect(len(items))
        if not items:
            return
        with self._lock:
            if self._closed:
                raise RuntimeError("the Predictor is closed")
            self._open.add(call)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._consume, name="copyless-ray-stream", daemon=True
                )
                self._thread.start()
            for item in items:  # under the lock: a call's rows stay together
                self._queue.put(item)
        try:
            while not call.done.wait(POLL_S):
                thread = self._thread
                if thread is None or not thread.is_alive():
                    call.fail(RuntimeError("the Predictor's pipeline stopped"))
        finally:
            with self._lock:
                self._open.discard(call)

    def _items(self) -> Iterator[Item]:
        while True:
            try:
                item = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                if self._closed:
                    return
                continue
            if item is _END:
                return
            yield item

    def _consume(self) -> None:
        result: Result
        try:
            for result in self._pipeline.map(self._items()):
                item: Item = result.item
                item.call.settle(item.index, result.error)
        except BaseException as exc:  # the pipeline failed: no call may wait forever
            logger.error("the Predictor's pipeline failed", exc_info=exc)
            with self._lock:
                for call in list(self._open):
                    call.fail(exc)
                while not self._queue.empty():  # their rows: the next call starts afresh
                    self._queue.get_nowait()

    def close(self) -> None:
        """End the stream (the rows queued still go through), then free the pipeline."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        self._queue.put(_END)
        if thread is not None:
            thread.join()
        self._pipeline.close()


def copy_frame(frame: npt.NDArray[Any], inputs: ItemTensors) -> None:
    """Copy one frame of a ``pixels`` column into its row of the batch tensor."""
    np.copyto(inputs[0].numpy()[0], frame)
