"""Async job bookkeeping: ids, in-flight limits, busy memory, ordered callbacks, wait.

Life of a job: submitted (holds its tensors and slot) -> finished (tensors released, status
final) -> reported (callback ran, in submission or completion order) -> collected by
``wait``. ``wait`` returns only once the callback has run, so a callback's exception can be
reported by it (as FAILURE; the exception is logged with its traceback and kept on the job).

Capacity (``max_concurrent_runs``) is handed back in submission order: the jobs in flight
are a window from the oldest unfinished job to the newest, and a job is admitted only while
that window is shorter than the limit. So when a job is admitted, every job submitted
``max_concurrent_runs`` or more before it has finished and released its tensors, whatever
order the worker threads finished them in: rotating ``K >= max_concurrent_runs`` output
buffers with submit-and-retry never meets a buffer still bound.

No head-of-line blocking of results: a finished job is collectable at once unless it has a
callback that must wait its turn. With ``callback_order="completion"`` that never happens;
with ``"submission"`` only a job *with* a callback waits for the callbacks of jobs submitted
before it (a job without one has nothing to order and is reported when it finishes).

Sync calls hold memory too: each is a :class:`SyncCall` (a type of its own, not a job id),
registered for its duration so async jobs cannot write what it reads or reads what it writes.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..memory import NpuTensor
from ..types import JobHandle, StatusCode
from ._fast import FastPath
from ._log import RunnerLog
from ._plan import CallPlan, overlaps

logger = logging.getLogger(__name__)

Callback = Callable[[JobHandle], Any]
Ranges = tuple[tuple[int, int], ...]

#: Finished jobs nobody waits for (callback-only users) are kept this many at most.
MAX_UNCOLLECTED = 65536


@dataclass(frozen=True, slots=True)
class Payload:
    """What an async job holds while in flight: its plan and the caller's tensor lists (so
    that the tensors, their memory and fds, outlive the job whatever the caller drops)."""

    plan: CallPlan
    inputs: Sequence[Sequence[NpuTensor]]
    outputs: Sequence[Sequence[NpuTensor]]


@dataclass(eq=False, slots=True)
class Job:
    """One async job, from admission to collection (``wait``)."""

    job_id: int
    callback: Callback | None
    in_ranges: Ranges
    out_ranges: Ranges
    payload: Payload | None = None  # set on admission, dropped when the job finishes
    status: StatusCode = StatusCode.JOB_PENDING
    finished: bool = False
    callback_error: BaseException | None = None
    reported: threading.Event = field(default_factory=threading.Event)

    def describe(self) -> str:
        return f"job {self.job_id}"

    @property
    def plan(self) -> CallPlan:
        """The job's call plan (while in flight: its payload is set on admission)."""
        if self.payload is None:
            raise RuntimeError(f"job {self.job_id} holds no payload (finished or not admitted)")
        return self.payload.plan

    @property
    def trace_id(self) -> int:
        """How the profiling trace names this job's events."""
        return self.job_id


@dataclass(eq=False, frozen=True, slots=True)
class SyncCall:
    """A running ``execute``: the memory it holds until it returns (no job id: not a job)."""

    in_ranges: Ranges
    out_ranges: Ranges

    def describe(self) -> str:
        return "a synchronous call"

    @property
    def trace_id(self) -> str:
        """How the profiling trace names this call's events (no job id: not a job)."""
        return "sync"


class _FastCall(SyncCall):
    """The call the C fast path is running (its ranges, as ``FastPath.enter`` reports)."""

    __slots__ = ()


Holder = Job | SyncCall | _FastCall


class JobTable:
    """Thread-safe registry of jobs and of the memory running work holds; one per runner."""

    def __init__(
        self, max_in_flight: int, callback_order: str, fast: FastPath, log: RunnerLog | None = None
    ) -> None:
        self._log = log if log is not None else RunnerLog(logger)
        self._lock = threading.Lock()
        self._no_sync_calls = threading.Condition(self._lock)  # notified when the last one leaves
        self._closing = False
        # Sync calls replayed by the fast path hold memory too: every Python-path holder is
        # counted by it (enter/leave), and checked against the call it may be running.
        self._fast = fast
        self._max_in_flight = max_in_flight
        self._in_submission_order = callback_order == "submission"
        self._next_id = 1
        self._jobs: dict[int, Job] = {}
        self._holders: set[Job | SyncCall] = set()  # running work and the memory it holds
        self._sync_calls = 0
        # Admitted jobs from the oldest unfinished one on, in submission order: the capacity
        # in use (see the module docstring).
        self._window: collections.deque[Job] = collections.deque()
        self._order: collections.deque[Job] = collections.deque()
        self._dispatching = False
        self._uncollected: dict[int, None] = {}  # reported, not yet collected, oldest first
        self._jobs_run = 0
        self._callback_errors = 0

    # -- admission ----------------------------------------------------------------------
    def _conflict(self, in_ranges: Ranges, out_ranges: Ranges) -> StatusCode | None:
        """Why this call must not run now, or None. Call with the lock held; on None the
        caller holds one fast-path ``enter`` it must ``leave``."""
        running = self._fast.enter()
        holders: list[Holder] = list(self._holders)
        if running is not None:
            holders.append(_FastCall(*running))
        refused = _refusal(self._log, in_ranges, out_ranges, holders)
        if refused is not None:
            self._fast.leave()
        return refused

    def enter_sync(self, in_ranges: Ranges, out_ranges: Ranges) -> SyncCall | StatusCode:
        """Register a synchronous call's memory; returns its token for :meth:`leave_sync`,
        or why it must not run (FAILURE once :meth:`close_sync` has begun)."""
        with self._lock:
            if self._closing:
                return StatusCode.FAILURE
            refused = self._conflict(in_ranges, out_ranges)
            if refused is not None:
                return refused
            call = SyncCall(in_ranges, out_ranges)
            self._holders.add(call)
            self._sync_calls += 1
            return call

    def leave_sync(self, call: SyncCall) -> None:
        with self._lock:
            self._holders.remove(call)
            self._sync_calls -= 1
            self._jobs_run += 1
            self._fast.leave()
            if self._closing and not self._sync_calls:
                self._no_sync_calls.notify_all()

    def close_sync(self, timeout_s: float) -> bool:
        """Refuse new synchronous calls and wait up to ``timeout_s`` for those inside the
        engines to return (the runner's close must not release an engine under a running
        call). True when none is left."""
        with self._no_sync_calls:
            self._closing = True
            return self._no_sync_calls.wait_for(lambda: not self._sync_calls, timeout_s)

    def admit(
        self, in_ranges: Ranges, out_ranges: Ranges, callback: Callback | None
    ) -> Job | StatusCode:
        """Register an async job, or say why not: RESOURCE_UNAVAILABLE, INVALID_INPUT/OUTPUT."""
        with self._lock:
            if len(self._window) >= self._max_in_flight:
                return StatusCode.RESOURCE_UNAVAILABLE
            refused = self._conflict(in_ranges, out_ranges)
            if refused is not None:
                return refused
            job = Job(self._next_id, callback, in_ranges, out_ranges)
            self._next_id += 1
            self._holders.add(job)
            self._window.append(job)
            self._jobs[job.job_id] = job
            if self._in_submission_order and callback is not None:
                self._order.append(job)  # only callbacks are ordered
            return job

    # -- completion ---------------------------------------------------------------------
    def finish(self, job: Job, status: StatusCode) -> None:
        """Mark an async job done (slot and memory free), then report callbacks in order."""
        with self._lock:
            job.status = status
            job.finished = True
            job.payload = None
            self._holders.discard(job)  # its tensors are free from here on
            while self._window and self._window[0].finished:
                self._window.popleft()  # capacity comes back in submission order
            self._jobs_run += 1
            self._fast.leave()
        if self._in_submission_order and job.callback is not None:
            self._dispatch_in_order()
        else:
            self._report(job)

    def _dispatch_in_order(self) -> None:
        # One thread reports at a time; others leave their finished jobs to it.
        while True:
            with self._lock:
                if self._dispatching or not self._order or not self._order[0].finished:
                    return
                self._dispatching = True
                job = self._order.popleft()
            try:
                self._report(job)
            finally:
                with self._lock:
                    self._dispatching = False

    def _report(self, job: Job) -> None:
        if job.callback is not None:
            try:
                job.callback(JobHandle(job.status, job.job_id))
            except BaseException as exc:  # noqa: BLE001 - logged, kept, reported by wait
                job.callback_error = exc
                with self._lock:
                    self._callback_errors += 1
                self._log.error("callback of job %d raised", job.job_id, exc_info=exc)
        with self._lock:
            self._uncollected[job.job_id] = None
            while len(self._uncollected) > MAX_UNCOLLECTED:
                oldest = next(iter(self._uncollected))
                del self._uncollected[oldest]
                self._jobs.pop(oldest, None)
        job.reported.set()

    # -- waiting ------------------------------------------------------------------------
    def wait(self, handle: Any, timeout_ms: Any) -> StatusCode:
        job_id = getattr(handle, "job_id", handle)
        if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
            return StatusCode.INVALID_JOB_ID
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            return StatusCode.INVALID_JOB_ID
        timeout = _seconds(timeout_ms)
        done = job.reported.is_set() if timeout == 0.0 else job.reported.wait(timeout)
        if not done:
            return StatusCode.JOB_PENDING
        with self._lock:
            if self._jobs.pop(job_id, None) is None:
                return StatusCode.INVALID_JOB_ID  # another thread collected it first
            self._uncollected.pop(job_id, None)
        if job.callback_error is not None and job.status is StatusCode.SUCCESS:
            return StatusCode.FAILURE
        return job.status

    def pending_jobs(self) -> list[Job]:
        with self._lock:
            return [job for job in self._jobs.values() if not job.finished]

    @property
    def in_flight(self) -> int:
        """Capacity in use: admitted jobs from the oldest unfinished one on."""
        return len(self._window)

    @property
    def jobs_run(self) -> int:
        return self._jobs_run

    @property
    def callback_errors(self) -> int:
        return self._callback_errors


def _refusal(
    log: RunnerLog, in_ranges: Ranges, out_ranges: Ranges, holders: list[Holder]
) -> StatusCode | None:
    for holder in holders:
        if overlaps(out_ranges, holder.out_ranges) or overlaps(out_ranges, holder.in_ranges):
            log.repeated(logging.ERROR, "busy-output",
                         "output memory is bound to %s still in flight", holder.describe())
            return StatusCode.INVALID_OUTPUT
        if overlaps(in_ranges, holder.out_ranges):
            log.repeated(logging.ERROR, "busy-input",
                         "input memory is an output of %s still in flight", holder.describe())
            return StatusCode.INVALID_INPUT
    return None


def _seconds(timeout_ms: Any) -> float | None:
    """wait()'s timeout: None or negative waits without limit; 0 polls."""
    if timeout_ms is None:
        return None
    try:
        value = float(timeout_ms)
    except (TypeError, ValueError):
        return 0.0
    if value != value:  # NaN
        return 0.0
    if value < 0:
        return None
    return value / 1000.0
