"""The Runner: a compiled model on one backend, with sync and async execution.

Zero-copy contract: tensors whose info says ``TensorType.HW`` are bound to the engine in
place (their memory is read/written by the engine directly); ``TensorType.CPU`` tensors are
converted by ``copyless.layout`` into runner-owned staging buffers and back (one fused pass
each way: that is the copy). Per-frame tensors that do not sit contiguously are gathered.

The runner is the front of its parts (see docs/architecture.md): the plan cache, the job
table, the engine set, the execution and the C fast path (``_replay.py``).

Errors: construction and queries raise ``CopylessError`` subclasses; ``execute``,
``execute_async`` and ``wait`` return a :class:`StatusCode` and log the reason.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ..backends import Backend, Engine, EngineCache
from ..memory import NpuTensor
from ..model import CompiledModel
from ..types import (
    ExecuteAsyncCallback,
    JobHandle,
    ModelLoadError,
    NpuTensorInfo,
    OptionError,
    RunnerType,
    StatusCode,
)
from ._allocation import allocate_tensor, sub_tensor
from ._choice import EngineChoice
from ._engine_set import EngineSet
from ._execution import Execution
from ._jobs import Job, JobTable, Payload
from ._log import RunnerLog
from ._options import RunnerOptions
from ._plan import BindError
from ._plan_cache import PlanCache
from ._queries import ModelQueries
from ._replay import Replays
from ._trace import Trace
from ._warmup import prime, start_workers

logger = logging.getLogger(__name__)

#: How long close() waits for running jobs, callbacks and sync calls before returning.
CLOSE_TIMEOUT_S = 10.0


class Runner(ModelQueries):
    """Executes one compiled model. Build it with ``RunnerFactory.create_runner``.

    Thread-safe: many threads may call ``execute``/``execute_async``/``wait`` at once, each
    with its own tensors. Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        model: CompiledModel,
        options: RunnerOptions,
        backend: Backend,
        engines: Sequence[Engine],
        async_loader: Callable[[], list[Engine]] | None = None,
        engine_cache: EngineCache | None = None,
    ) -> None:
        super().__init__(model, options)
        self._log = RunnerLog(logger, options.log_level, options.debug)
        self._backend = backend
        self._engine_cache = engine_cache
        self._engines = EngineSet(model, engines, async_loader, self._log)
        self._memory = self._engines.memory
        self._plans = PlanCache(model, self._memory)
        # Repeated sync calls on the same, already bound tensors are replayed in C (_fast.c).
        self._replays = Replays(enabled=not (options.ai_analyzer_profiling or options.debug))
        self._fast = self._replays.path
        self._jobs = JobTable(
            options.max_concurrent_runs, options.callback_order, self._fast, self._log
        )
        self._trace = Trace(options.ai_analyzer_profiling, options.profile_path)
        self._execution = Execution(options, self._engines, self._jobs, self._trace, self._log)
        self._lock = threading.Lock()  # close() against itself
        self._finalizer = weakref.finalize(
            self, _shutdown, self._execution, self._engines, self._trace
        )
        # Which engine runs the model and why: forced here; RunnerType.VAIML's factory
        # path replaces it with the measured (or cached) choice.
        self._engine_choice = EngineChoice.forced(
            RunnerType.OPENVINO if backend.name == "openvino" else RunnerType.ONNXRUNTIME
        )
        # The job workers start now, not on the first execute_async: a thread start waits
        # for the new thread to be scheduled (under load, tens of ms on the caller).
        start_workers(self._execution.executor, self._worker_count())

    def get_property(self, key: str) -> Any:
        """Backend facts and live counters: backend, device, engine ("onnxruntime" or
        "openvino"), engine_reason (why, one line), runner_type (the RunnerType asked
        for), model, batch_size, partitions,
        jobs_run, fast_calls, jobs_in_flight, bytes_converted, buffer_syncs (dma-buf syncs
        the runner issued), callback_errors,
        engine_threads, async_engine_threads, engines_loaded, trace_events, engine_cache
        (None, or its path and the engines it served and stored), or any option."""
        self._check_open()
        options = self._options
        props: dict[str, Any] = {
            "backend": self._backend.name,
            "engine": self._engine_choice.engine_name,
            "engine_reason": self._engine_choice.reason,
            "runner_type": self._engine_choice.requested,
            "device": self._backend.device,
            "model": self._model.name,
            "batch_size": self._model.batch_size,
            "partitions": [p.name for p in self._model.partitions],
            "jobs_run": self._jobs.jobs_run + self._fast.count,
            "fast_calls": self._fast.count,
            "jobs_in_flight": self._jobs.in_flight,
            "bytes_converted": self._execution.bytes_converted,
            "buffer_syncs": self._execution.buffer_syncs,
            "callback_errors": self._jobs.callback_errors,
            "engine_threads": options.engine_threads(),
            "async_engine_threads": (
                options.async_engine_threads()
                if self._engines.own_async_engines
                else options.engine_threads()
            ),
            "trace_events": self._trace.count,
            "engines_loaded": len(self._engines.loaded),
            "engine_cache": None if self._engine_cache is None else self._engine_cache.describe(),
            "memory": self._memory,
        }
        if key in props:
            return props[key]
        if hasattr(options, key):
            return getattr(options, key)
        raise OptionError(f"unknown property {key!r}; known: {', '.join(props)}")

    # -- allocation ---------------------------------------------------------------------
    def allocate_npu_tensor(self, info: NpuTensorInfo, memory_bank: int | None = None) -> NpuTensor:
        """A runner-allocated (XRT_BO) tensor over fd-backed memory, exportable as an fd;
        for a HW view on a runner whose engines read device memory (``device="cuda"``),
        device memory instead, which CuPy and PyTorch import without a copy
        (``from_dlpack``). CPU views stay in host memory: the runner converts them there.

        For an output whose shape depends on the data, ``info`` may be the model's with its
        capacity dims changed (``dataclasses.replace(info, shape=...)``); -1 dims raise
        :class:`TensorError`.

        The memory is released when the last reference to the tensor (and its views) goes.
        ``memory_bank`` (VART-ML's bank index) must be None or 0: host memory has one bank.
        """
        self._check_open()
        return allocate_tensor(info, memory_bank, self._memory)

    def allocate_sub_tensor(self, parent: NpuTensor, info: NpuTensorInfo, offset: int) -> NpuTensor:
        """A view of ``info`` at byte ``offset`` of ``parent``; the parent lives while it does."""
        self._check_open()
        return sub_tensor(parent, info, offset)

    # -- execution ----------------------------------------------------------------------
    def execute(
        self, inputs: Sequence[Sequence[NpuTensor]], outputs: Sequence[Sequence[NpuTensor]]
    ) -> StatusCode:
        """Run one batch and block until it is done. Never raises.

        A call with the same tensor objects as an earlier one whose tensors were all bound in
        place (nothing converted) is replayed by the C fast path: an identity check, a
        closed check per tensor, and the engine call.
        """
        try:
            replayed = self._fast(inputs, outputs)
        except Exception as exc:  # noqa: BLE001 - the engine failed in a replayed call
            return self._execution.engine_failed("a replayed call", exc)
        if replayed is not None:
            return replayed  # type: ignore[no-any-return]
        if self._closed:
            self._log.error("execute on a closed runner")
            return StatusCode.FAILURE
        try:
            plan, cached = self._plans.plan(inputs, outputs)
        except BindError as exc:
            self._log.error("execute: %s", exc)
            return exc.status
        call = self._jobs.enter_sync(plan.in_ranges, plan.out_ranges)
        if isinstance(call, StatusCode):
            return call
        try:
            status = self._execution.run(plan, call)
        finally:
            self._jobs.leave_sync(call)
        if cached and status is StatusCode.SUCCESS and not self._closed:
            slots = self._engines.sync_slots
            self._replays.install(plan, inputs, outputs, slots.acquire, slots.release)
        return status

    def execute_async(
        self,
        inputs: Sequence[Sequence[NpuTensor]],
        outputs: Sequence[Sequence[NpuTensor]],
        callback: ExecuteAsyncCallback | None = None,
    ) -> JobHandle:
        """Submit one batch; returns at once with a job id, or the reason it was refused.

        Never blocks for engine start-up: without :meth:`warm_up` the async jobs' engines
        (onnxruntime) load on the worker thread of the first job, which just finishes later
        (a failed load ends that job with OUT_OF_MEMORY / RUNTIME_ERROR); the first jobs
        also allocate the engines' working memory. After ``warm_up()`` a submit takes
        microseconds and the first job runs at steady-state speed.
        """
        if self._closed:
            self._log.error("execute_async on a closed runner")
            return JobHandle(StatusCode.FAILURE, 0)
        if callback is not None and not callable(callback):
            self._log.error("execute_async: callback is not callable")
            return JobHandle(StatusCode.INVALID_INPUT, 0)
        try:
            plan, _cached = self._plans.plan(inputs, outputs)
        except BindError as exc:
            self._log.error("execute_async: %s", exc)
            return JobHandle(exc.status, 0)
        admitted = self._jobs.admit(plan.in_ranges, plan.out_ranges, callback)
        if not isinstance(admitted, Job):
            return JobHandle(admitted, 0)
        # the job holds its tensors (the caller's lists) until it finishes
        admitted.payload = Payload(plan, inputs, outputs)
        if not self._execution.submit(admitted):
            return JobHandle(StatusCode.FAILURE, 0)
        return JobHandle(StatusCode.SUCCESS, admitted.job_id)

    def wait(self, job_handle: JobHandle, timeout_ms: int = -1) -> StatusCode:
        """The job's final status; JOB_PENDING on timeout (0 polls, negative waits without
        limit); INVALID_JOB_ID for an unknown or already collected job.

        Typed for the checker (``mypy --strict`` sees a wrong argument); at run time
        anything else is a status too, never an exception: a bare job id is looked up, a
        timeout that is no number polls."""
        try:
            return self._jobs.wait(job_handle, timeout_ms)
        except Exception:  # noqa: BLE001 - logged with its traceback; wait never raises
            self._log.exception("wait failed")
            return StatusCode.FAILURE

    def warm_up(self) -> None:
        """Do now what the first jobs would otherwise pay for (VART-ML's prime phase).

        Loads the async jobs' engines (onnxruntime), creates one execution slot per
        concurrent run plus one for ``execute`` and runs each once (on zeros, in
        runner-allocated buffers; skipped when outputs depend on the data), and starts the
        worker threads. Afterwards ``execute_async`` on tensors seen before returns in
        microseconds and the first jobs run at steady-state speed. Without it nothing is
        lost: ``execute_async`` still returns at once, and the first jobs are slower.
        Idempotent. Raises ModelLoadError when the async engines cannot be loaded,
        RunnerClosedError on a closed runner.
        """
        self._check_open()
        refused = self._engines.load_async()
        if refused is not None:
            raise ModelLoadError(f"cannot load the async engines: {refused.name} (see the log)")
        count = self._options.max_concurrent_runs
        prime(self._model, self._engines, count, self.allocate_npu_tensor)
        start_workers(self._execution.executor, self._worker_count())

    def _worker_count(self) -> int:
        """The job workers a runner keeps: one per concurrent run, one for callbacks."""
        return min(self._options.async_threadpool_depth, self._options.max_concurrent_runs + 1)

    @property
    def native_async(self) -> bool:
        """Whether async jobs run on the engine's own async requests (the ``native_async``
        option on an engine that has them: OpenVINO), not on a job worker blocking in the
        engine. :class:`copyless.Pipeline` submits with ``execute_async`` then (and on a
        :attr:`throughput_async` runner), and with ``execute`` on its own worker threads
        otherwise (one hop fewer per job)."""
        return self._execution.native

    @property
    def throughput_async(self) -> bool:
        """Whether async jobs run on engines compiled for concurrent requests, apart from the
        latency engines ``execute`` runs on (OpenVINO's throughput streams, loaded by
        :meth:`warm_up` or the first job; ``async_engines="shared"`` turns it off)."""
        return self._engines.own_async_engines and not self._backend.capabilities.threads_per_engine

    @property
    def engine(self) -> RunnerType:
        """The engine running the model: ONNXRUNTIME or OPENVINO (``RunnerType.VAIML``'s
        measured choice, or the one ``runner_type`` forced)."""
        return self._engine_choice.engine

    @property
    def engine_reason(self) -> str:
        """Why :attr:`engine` runs the model, in one line (with the measured medians)."""
        return self._engine_choice.reason

    def _adopt_choice(self, choice: EngineChoice) -> None:
        """The factory's: ``RunnerType.VAIML`` chose this runner's engine (and says why)."""
        self._engine_choice = choice
        logger.info("%s: runs on %s (%s)", self._model.name, choice.engine_name, choice.reason)

    @property
    def engine_choice(self) -> EngineChoice:
        """The whole choice: engine, the runner type asked for, reason, medians, cached."""
        return self._engine_choice

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        """Finish or cancel in-flight jobs and wait for sync calls inside the engines (bounded
        time), then release engines and threads.

        Jobs not yet started end with FAILURE; their callbacks still run. A job or callback
        still running after ``CLOSE_TIMEOUT_S`` is left to finish on its worker thread (close
        returns; that thread and the engines end when it does). Later execution calls return
        FAILURE; queries and allocation raise RunnerClosedError.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._execution.refuse_jobs()  # queued jobs now finish as FAILURE
        self._engines.stop_loading()
        replays_done = self._replays.stop(CLOSE_TIMEOUT_S)  # a replayed call returns first
        syncs_done = self._jobs.close_sync(CLOSE_TIMEOUT_S)  # then the Python path's calls
        jobs_done = self._execution.cancel(CLOSE_TIMEOUT_S)
        path = self._trace.write()
        if path:
            self._log.info("profiling trace written to %s", path)
        self._log.flush()
        self._plans.clear()
        if not (jobs_done and replays_done and syncs_done):
            # A job (or its callback) is still running: releasing the engines and slots it
            # uses would pull memory from under it, and joining its thread would make close()
            # unbounded. Its thread ends when it returns; the engines go with the last ref.
            self._finalizer.detach()
            self._execution.executor.shutdown(wait=False, cancel_futures=True)
        else:
            self._finalizer()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where, state = f"{self._backend.name}/{self._backend.device}", ("open", "closed")
        return f"<Runner {self._model.name!r} on {where} {state[self._closed]}>"


def _shutdown(execution: Execution, engines: EngineSet, trace: Trace) -> None:
    # Module level: the finalizer must not keep the runner alive.
    execution.executor.shutdown(wait=True, cancel_futures=True)
    trace.write()  # a runner never closed still leaves a complete trace file
    engines.close()
