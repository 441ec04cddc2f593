"""Running a planned call on an execution slot, for sync calls and async jobs alike.

``run`` takes a slot from the pool the caller's type picks (:class:`~._jobs.Job` or
:class:`~._jobs.SyncCall`: told apart by type, not by an id value), syncs dma-buf inputs,
binds (only what changed), runs every partition, syncs outputs, and gives the slot back.
Async jobs run on the worker threads of ``async_threadpool_depth``; a job's ``finish``
(which releases its tensors and reports it) comes after its slot is back.

Counters are bumped by worker threads: under this part's lock.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from ..memory import NpuTensor
from ..types import StatusCode, TensorDirection
from ._engine_set import EngineSet
from ._jobs import Job, JobTable, SyncCall
from ._log import RunnerLog
from ._options import RunnerOptions
from ._plan import CallPlan
from ._slot import DynamicOutputTooSmall
from ._trace import Trace


class Execution:
    """The worker threads, the jobs they run, and the runner's execution counters."""

    def __init__(
        self,
        options: RunnerOptions,
        engines: EngineSet,
        jobs: JobTable,
        trace: Trace,
        log: RunnerLog,
    ) -> None:
        self._options = options
        self._engines = engines
        self._jobs = jobs
        self._trace = trace
        self._log = log
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=options.async_threadpool_depth, thread_name_prefix="copyless-job"
        )
        self._futures: dict[int, concurrent.futures.Future[None]] = {}
        # Engines with native async runs (OpenVINO) start a job from the submitting thread
        # and end it on their own callback thread: no worker-thread hop (one partition,
        # every tensor bound in place, no trace; other plans take the workers).
        loaded = engines.loaded
        self._native = (
            len(loaded) == 1 and loaded[0].capabilities.native_async and not trace.enabled
        )
        self._native_jobs: dict[int, Job] = {}
        self._lock = threading.Lock()
        self._closing = False
        self._bytes_converted = 0
        self._buffer_syncs = 0

    @property
    def native(self) -> bool:
        """Async jobs start on the engine's own async requests (see :meth:`submit`)."""
        return self._native

    @property
    def bytes_converted(self) -> int:
        return self._bytes_converted

    @property
    def buffer_syncs(self) -> int:
        return self._buffer_syncs

    # -- async jobs ---------------------------------------------------------------------
    def submit(self, job: Job) -> bool:
        """Hand an admitted job to a worker; False (the job finished as FAILURE) when the
        workers are shut down."""
        plan = job.plan
        with self._lock:
            if self._closing:
                self._jobs.finish(job, StatusCode.FAILURE)
                return False
            native = self._native and plan.direct
            if native:
                self._native_jobs[job.job_id] = job  # cancel() waits for it
            # A native run is started from a worker too: start_async does part of the run
            # on the thread that calls it, and execute_async returns at once.
            work = (lambda: self._start_native(job, plan)) if native else (
                lambda: self._run_job(job))  # fmt: skip
            try:
                future = self.executor.submit(work)
            except RuntimeError:  # executor shut down concurrently
                self._native_jobs.pop(job.job_id, None)
                self._jobs.finish(job, StatusCode.FAILURE)
                return False
            if not native:
                self._futures[job.job_id] = future
        return True

    def _start_native(self, job: Job, plan: CallPlan) -> None:
        """Start ``job`` on the engine's own async request from this (worker) thread; it
        ends in :meth:`_native_done` on the engine's callback thread."""
        pool = self._engines.slots_for(job)
        try:
            slot = pool.acquire()
        except Exception as exc:  # noqa: BLE001 - execution never raises
            memory = isinstance(exc, MemoryError)
            self._log.error("%s: cannot create an execution slot: %s", job.describe(), exc)
            self._end_native(job, StatusCode.OUT_OF_MEMORY if memory else StatusCode.RUNTIME_ERROR)
            return
        try:
            slot.start(plan, lambda error: self._native_done(job, pool, slot, error))
        except Exception as exc:  # noqa: BLE001 - a start that fails ends the job
            self._native_done(job, pool, slot, exc)

    def _native_done(
        self, job: Job, pool: Any, slot: Any, error: BaseException | None
    ) -> None:
        status = StatusCode.SUCCESS
        if isinstance(error, Exception):
            status = self.engine_failed(job.describe(), error)
        elif error is not None:
            status = StatusCode.FAILURE
        pool.release(slot)  # free before the job is: its slot is reusable
        self._end_native(job, status)

    def _end_native(self, job: Job, status: StatusCode) -> None:
        """Finish ``job`` here (the engine's callback thread) when it has no callback; a
        callback runs on a job worker instead, so one that blocks never stalls OpenVINO's
        completions (the run itself took no hop)."""
        if job.callback is not None:
            try:
                self.executor.submit(self._finish_native, job, status)
                return
            except RuntimeError:  # shut down by close(): report here
                pass
        self._finish_native(job, status)

    def _finish_native(self, job: Job, status: StatusCode) -> None:
        self._jobs.finish(job, status)
        with self._lock:
            self._native_jobs.pop(job.job_id, None)

    def _run_job(self, job: Job) -> None:
        plan = job.plan
        status = StatusCode.FAILURE
        try:
            # The async engines load here, on the worker, not on the submitting thread: a
            # no-op after warm_up() or the first job; concurrent first jobs wait for one load.
            refused = None if self._closing else self._engines.load_async()
            if refused is not None:
                status = refused
            elif not self._closing:
                status = self.run(plan, job)
        finally:
            # finish() runs callbacks; the future stays listed until they return, so close()
            # sees (and bounds its wait for) a callback that blocks.
            self._jobs.finish(job, status)
            with self._lock:
                self._futures.pop(job.job_id, None)

    def refuse_jobs(self) -> None:
        """Jobs submitted from now on, and queued ones when they start, finish as FAILURE."""
        with self._lock:
            self._closing = True

    def cancel(self, timeout_s: float) -> bool:
        """Refuse new jobs, cancel queued ones (they finish as FAILURE, callbacks run) and
        wait up to ``timeout_s`` for running ones; True when none is left running."""
        with self._lock:
            self._closing = True
            futures = dict(self._futures)
            native = list(self._native_jobs.values())
        for future in futures.values():
            future.cancel()
        _done, not_done = concurrent.futures.wait(list(futures.values()), timeout=timeout_s)
        native_left = [job for job in native if not job.reported.wait(timeout_s)]
        for job in self._jobs.pending_jobs():
            if job.job_id in futures and futures[job.job_id].cancelled():
                self._jobs.finish(job, StatusCode.FAILURE)
        if not_done or native_left:
            self._log.warning("close(): %d job(s) still running after %.0f s",
                              len(not_done) + len(native_left), timeout_s)  # fmt: skip
        return not not_done and not native_left

    # -- one call -----------------------------------------------------------------------
    def run(self, plan: CallPlan, caller: Job | SyncCall) -> StatusCode:
        """Run ``plan`` for ``caller`` on a slot of its pool; never raises."""
        pool = self._engines.slots_for(caller)
        try:
            slot = pool.acquire()  # a new slot allocates its intermediates
        except MemoryError:
            self._log.exception("%s: out of memory for a new execution slot", caller.describe())
            return StatusCode.OUT_OF_MEMORY
        except Exception as exc:  # noqa: BLE001 - execution never raises
            self._log.error("%s: cannot create an execution slot: %s", caller.describe(), exc)
            return StatusCode.RUNTIME_ERROR
        try:
            # Only tensors whose sync does work (dma-bufs) are listed in plan.synced; host
            # memory is cache-coherent. skip_*_bo_sync hands these syncs to the application.
            if plan.synced and not self._options.skip_in_bo_sync:
                self._sync(plan.synced, TensorDirection.INPUT)
            slot.run(plan, self._trace, caller.trace_id)
            if plan.synced and not self._options.skip_out_bo_sync:
                self._sync(plan.synced, TensorDirection.OUTPUT)
        except DynamicOutputTooSmall as exc:  # the text only: a record keeping the
            self._log.error("%s: %s", caller.describe(), str(exc))  # exception keeps frames
            return StatusCode.INVALID_OUTPUT
        except MemoryError:
            self._log.exception("%s: out of memory", caller.describe())
            return StatusCode.OUT_OF_MEMORY
        except Exception as exc:  # noqa: BLE001 - execution never raises
            return self.engine_failed(caller.describe(), exc)
        finally:
            pool.release(slot)
        if plan.converted_bytes:
            with self._lock:
                self._bytes_converted += plan.converted_bytes
        if self._options.debug:
            self._log.debug(
                "%s: %d frame(s), %d bytes converted, %d tensor(s) bound in place",
                caller.describe(), plan.frames, plan.converted_bytes,
                sum(1 for b in plan.inputs + plan.outputs if b not in plan.staged_inputs
                    and b not in plan.staged_outputs),
            )  # fmt: skip
        return StatusCode.SUCCESS

    def engine_failed(self, who: str, exc: Exception) -> StatusCode:
        if self._closing:
            self._log.warning("%s cancelled by close(): %s", who, exc)
            return StatusCode.FAILURE
        self._log.error("%s: engine failed: %s", who, exc)
        return StatusCode.RUNTIME_ERROR

    def _sync(self, tensors: tuple[NpuTensor, ...], direction: TensorDirection) -> None:
        for tensor in tensors:
            if tensor.info.direction is direction:
                tensor.sync_buffer()
                with self._lock:
                    self._buffer_syncs += 1
