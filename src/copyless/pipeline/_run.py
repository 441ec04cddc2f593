"""One iteration of a pipeline (a ``map`` or ``map_sources`` call): workers, order, close.

A worker thread per slot loops: take up to ``batch`` items from the feed (one worker at a
time, so indices stay in order), ``prepare`` each into its row of the slot, run one job for
the rows, ``finish`` each row, and deliver the results. The job is the runner's ``execute``
on the worker's own thread (the engine releases the GIL, so the slots' jobs overlap each
other and the other workers' prepare and finish, with no hop to a job worker and back; a
slot's tensors are the same every time, so the runner replays the call in C), or, on a
runner whose engine runs async requests of its own (``Runner.native_async``),
``execute_async`` and a wait for it (measured against each other: README, Performance).
Delivery puts results back in order per source; the consumer (the caller's iterator) takes
them from there. At most ``window`` items are between their source and the consumer, so
memory is bounded by the slots and the window, whatever the number of items.

Stopping: :meth:`Run.stop` stops taking items; the items already taken go through and are
delivered (graceful: what a SIGINT handler wants). :meth:`Run.close` also abandons items
not yet submitted, waits at most ``timeout_s`` for running jobs, and ends the iteration.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..layout import convert
from ..memory import NpuTensor
from ..runner import Runner
from ..types import JobError, JobHandle, StatusCode
from ._feeds import POLL_S, Feed, Pulled
from ._result import STAGES, Result
from ._slots import ItemTensors, JobSlot
from ._stats import ItemCounts, StageClock

logger = logging.getLogger(__name__)

Prepare = Callable[[Any, ItemTensors], "Sequence[NpuTensor] | None"]
Finish = Callable[[Any, ItemTensors], Any]

#: How long a worker waits for the runner's capacity before asking again, seconds.
_CAPACITY_POLL_S = 0.002
#: The job id of a handle that ``execute`` ran (its status is final: nothing to wait for).
_DONE = -1


@dataclass(slots=True)
class _Prepared:
    pulled: Pulled
    tensors: Sequence[NpuTensor]
    prepare: float
    done_at: float


def _timings(prepare: float = 0.0, wait: float = 0.0, infer: float = 0.0,
             finish: float = 0.0) -> dict[str, float]:  # fmt: skip
    return dict(zip(STAGES, (prepare, wait, infer, finish), strict=True))


class Run:
    """The workers, the reorder buffer and the consumer side of one iteration."""

    def __init__(
        self,
        runner: Runner,
        slots: Sequence[JobSlot],
        feed: Feed,
        prepare: Prepare,
        finish: Finish,
        batch: int,
        wait_s: float,
        clock: StageClock,
        counts: ItemCounts,
    ) -> None:
        self._runner, self._feed = runner, feed
        self._prepare, self._finish = prepare, finish
        self._batch, self._wait_s = batch, wait_s
        self._clock, self._counts = clock, counts
        self._inputs = runner.get_num_input_tensors()
        # A job on this worker's thread (``execute``: the engine releases the GIL; no hop to
        # a job worker and back, and repeated slots replay in C) unless the runner's async
        # jobs run on engines made for concurrent requests (OpenVINO's throughput streams)
        # or on the engine's own async requests: execute_async reaches those.
        self._sync = not (runner.native_async or runner.throughput_async)
        self._cond = threading.Condition()
        self._take_lock = threading.Lock()
        self._stop = threading.Event()
        self._abandon = False
        self._deadline = float("inf")  # set by close: how long a running job is waited for
        self._ready: collections.deque[Result] = collections.deque()
        self._pending: dict[Any, dict[int, Result]] = {}
        self._next_index: dict[Any, int] = {}
        self._outstanding = 0  # taken from the feed, not yet handed to the consumer
        self._window = 2 * len(slots) * batch
        self._fatal: BaseException | None = None
        self._alive = len(slots)
        counts.start_run()
        self._threads = [
            threading.Thread(target=self._work, args=(slot,), daemon=True,
                             name=f"copyless-pipeline-{slot.index}")
            for slot in slots
        ]
        for thread in self._threads:
            thread.start()

    # -- the consumer --------------------------------------------------------------------
    def next(self) -> Result | None:
        """The next result in order, or None when the iteration is over."""
        with self._cond:
            while True:
                if self._ready and not self._abandon:
                    result = self._ready.popleft()
                    self._outstanding -= 1
                    self._cond.notify_all()
                    self._counts.delivered(result.source, result.error is not None)
                    return result
                if self._fatal is not None:
                    fatal, self._fatal = self._fatal, None
                    raise fatal
                if self._alive == 0 or self._abandon:
                    return None
                self._cond.wait(POLL_S)

    def stop(self) -> None:
        """Take no more items; the ones taken still go through and are delivered."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def close(self, timeout_s: float) -> bool:
        """Stop, abandon what is not yet submitted, wait up to ``timeout_s`` for the jobs
        running and the threads; True when every thread ended."""
        deadline = time.perf_counter() + timeout_s
        self._stop.set()
        with self._cond:
            self._deadline = deadline
            self._abandon = True
            self._cond.notify_all()
        self._feed.close(max(0.0, deadline - time.perf_counter()))
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.perf_counter()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            logger.warning("pipeline closed with %s still inside prepare, finish or a source: "
                           "they end when that call returns", ", ".join(alive))  # fmt: skip
        with self._cond:
            self._ready.clear()
            self._pending.clear()
        return not alive

    @property
    def in_flight(self) -> int:
        """Items taken from their sources and not yet handed to the consumer (0 once
        closed)."""
        with self._cond:
            return 0 if self._abandon else self._outstanding

    # -- the workers ---------------------------------------------------------------------
    def _work(self, slot: JobSlot) -> None:
        try:
            while True:
                pulled = self._take()
                if pulled is None:
                    break
                self._process(slot, pulled)
        except BaseException as exc:
            logger.error("pipeline worker failed", exc_info=exc)
            with self._cond:
                if self._fatal is None:
                    self._fatal = exc
            self._stop.set()
        finally:
            with self._cond:
                self._alive -= 1
                self._cond.notify_all()

    def _take(self) -> list[Pulled] | None:
        with self._take_lock:
            with self._cond:
                while self._outstanding + self._batch > self._window and not self._stop.is_set():
                    self._cond.wait(POLL_S)
            if self._stop.is_set():
                return None
            pulled = self._feed.take(self._batch, self._wait_s, self._stop)
            if pulled is None:
                return None
            with self._cond:
                self._outstanding += len(pulled)
            for each in pulled:
                self._counts.pulled(each.source)
            return pulled

    def _process(self, slot: JobSlot, pulled: list[Pulled]) -> None:
        rows: list[_Prepared] = []
        for each in pulled:
            if each.error is not None:
                self._deliver(Result(None, None, each.error, each.source, each.index,
                                     _timings()))  # fmt: skip
                continue
            row = slot.inputs[len(rows)]
            t0 = time.perf_counter()
            try:
                tensors = self._bind(self._prepare(each.item, row), row)
            except Exception as exc:  # noqa: BLE001 - this item's error, in its Result
                t1 = time.perf_counter()
                self._deliver(Result(each.item, None, exc, each.source, each.index,
                                     _timings(prepare=t1 - t0)))  # fmt: skip
                continue
            t1 = time.perf_counter()
            rows.append(_Prepared(each, tensors, t1 - t0, t1))
        if rows:
            self._run_job(slot, rows)

    def _bind(self, own: Sequence[NpuTensor] | None, row: ItemTensors) -> Sequence[NpuTensor]:
        """What the row binds: the slot's views, or the item's own tensors (batch 1: bound
        as they are; batch > 1: copied into the row, the one copy)."""
        if own is None:
            return row
        if not isinstance(own, (list, tuple)) or len(own) != self._inputs or not all(
            isinstance(t, NpuTensor) for t in own
        ):
            raise TypeError(
                f"prepare returned {type(own).__name__}: expected None (inputs written in "
                f"place) or a list of {self._inputs} NpuTensor to bind"
            )
        if self._batch == 1:
            return own
        for src, dst in zip(own, row, strict=True):
            a, b = src.numpy(), dst.numpy()
            if a.dtype == b.dtype and a.size == b.size:
                np.copyto(b, a.reshape(b.shape))
            else:
                convert(src, dst)
        return row

    def _run_job(self, slot: JobSlot, rows: list[_Prepared]) -> None:
        outputs = slot.outputs[: len(rows)]
        submitted, handle = self._submit([list(r.tensors) for r in rows],
                                         [list(o) for o in outputs])  # fmt: skip
        waits = [submitted - r.pulled.pulled_at - r.prepare for r in rows]
        if handle is None:  # closed before it could run: nobody takes these results
            return
        status = handle.status
        if status is StatusCode.SUCCESS and handle.job_id != _DONE:
            status = self._collect(handle)
        ended = time.perf_counter()
        infer = ended - submitted
        for r, wait, out in zip(rows, waits, outputs, strict=True):
            p = r.pulled
            if status is not StatusCode.SUCCESS:
                error = JobError(status, f"the job of item {p.index} returned")
                self._deliver(Result(p.item, None, error, p.source, p.index,
                                     _timings(r.prepare, wait, infer)))  # fmt: skip
                continue
            t0 = time.perf_counter()
            value, error_or_none = None, None
            try:
                value = self._finish(p.item, out)
            except Exception as exc:  # noqa: BLE001 - this item's error, in its Result
                error_or_none = exc
            finish = time.perf_counter() - t0
            self._deliver(Result(p.item, value, error_or_none, p.source, p.index,
                                 _timings(r.prepare, wait, infer, finish)))  # fmt: skip

    def _submit(self, inputs: list[list[NpuTensor]], outputs: list[list[NpuTensor]]
                ) -> tuple[float, JobHandle | None]:  # fmt: skip
        """Run the job: ``execute`` on this worker (a handle of its final status), or, on
        a runner whose async jobs run on the engine's own requests, ``execute_async``,
        waiting while the runner's capacity is in use. Returns when the job was handed to
        the runner (the start of its ``infer`` time) and the handle; None when the run was
        closed meanwhile (nothing submitted)."""
        if self._sync:
            started = time.perf_counter()
            if self._abandon:
                return started, None
            return started, JobHandle(self._runner.execute(inputs, outputs), _DONE)
        while True:
            if self._abandon:
                return time.perf_counter(), None
            started = time.perf_counter()
            handle = self._runner.execute_async(inputs, outputs)
            if handle.status is not StatusCode.RESOURCE_UNAVAILABLE:
                return started, handle
            with self._cond:
                self._cond.wait(_CAPACITY_POLL_S)

    def _collect(self, handle: JobHandle) -> StatusCode:
        """The job's status; on close, the job is waited for until the close deadline."""
        while True:
            status = self._runner.wait(handle, int(POLL_S * 1000))
            if status is not StatusCode.JOB_PENDING:
                with self._cond:
                    self._cond.notify_all()  # its capacity is back: a worker may submit
                return status
            if time.perf_counter() > self._deadline:  # closed, and the job is still running
                return StatusCode.FAILURE

    def _deliver(self, result: Result) -> None:
        self._clock.add_all(result.timings)
        with self._cond:
            pending = self._pending.setdefault(result.source, {})
            pending[result.index] = result
            at = self._next_index.get(result.source, 0)
            while at in pending:
                self._ready.append(pending.pop(at))
                at += 1
            self._next_index[result.source] = at
            self._cond.notify_all()
