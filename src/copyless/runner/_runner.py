"""The Runner: a compiled model on one backend, with sync and async execution.

Zero-copy contract: tensors whose info says ``TensorType.HW`` are bound to the engine in
place (their memory is read/written by the engine directly); ``TensorType.CPU`` tensors are
converted by ``copyless.layout`` into runner-owned staging buffers and back (one fused pass
each way: that is the copy). Per-frame tensors that do not sit contiguously are gathered.

Errors: construction and queries raise ``CopylessError`` subclasses; ``execute``,
``execute_async`` and ``wait`` return a :class:`StatusCode` and log the reason.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ..backends import HOST, Backend, Engine, EngineCache, common_memory
from ..memory import HostMemory, NpuTensor, check_bounded
from ..memory import cuda as cuda_memory
from ..model import CompiledModel, TensorSpec
from ..types import (
    JobHandle,
    MemoryType,
    ModelLoadError,
    NpuTensorInfo,
    OptionError,
    QuantParameters,
    ReadOnly,
    RunnerClosedError,
    StatusCode,
    TensorDirection,
    TensorError,
    TensorType,
    UnknownTensorError,
)
from ._jobs import Callback, Job, JobTable
from ._log import RunnerLog
from ._options import RunnerOptions
from ._plan import CallPlan, PlanError, build_plan
from ._replay import Replays
from ._slot import DynamicOutputTooSmall, Slot
from ._trace import Trace
from ._warmup import first_runs, start_workers

logger = logging.getLogger(__name__)

#: How long close() waits for running jobs before giving up on them.
CLOSE_TIMEOUT_S = 10.0
_PLAN_CACHE_SIZE = 64


class Runner:
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
        self._model = model
        self._options = options
        self._log = RunnerLog(logger, options.log_level, options.debug)
        self._backend = backend
        self._engine_cache = engine_cache
        self._engines = list(engines)  # every engine, closed at shutdown
        # The devices whose memory every engine binds in place (declared by the backends).
        self._memory = common_memory([engine.capabilities for engine in engines])
        self._sync_engines = list(engines)
        # Async jobs run on engines of their own when the backend's threads are per run
        # (onnxruntime): cores / max_concurrent_runs threads each, loaded by warm_up() (or
        # the "warm_up" option) or else by the first execute_async, so sync-only users keep
        # every core and pay nothing.
        self._async_loader = async_loader
        self._async_engines: list[Engine] | None = None
        self._load_lock = threading.Lock()
        self._closed = False
        self._lock = threading.Lock()
        # Repeated sync calls on the same, already bound tensors are replayed in C (_fast.c).
        self._replays = Replays(enabled=not (options.ai_analyzer_profiling or options.debug))
        self._fast = self._replays.path
        self._jobs = JobTable(
            options.max_concurrent_runs, options.callback_order, self._fast, self._log
        )
        self._trace = Trace(options.ai_analyzer_profiling, options.profile_path)
        # Call plans by tensor identity. Read, replaced and evicted by every calling thread:
        # only under _plans_lock (never held while a plan is built or a job runs).
        self._plans: dict[tuple[int, ...], CallPlan] = {}
        self._plans_lock = threading.Lock()
        self._free_slots: list[Slot] = []
        self._free_async_slots: list[Slot] = []
        self._all_slots: list[Slot] = []
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=options.async_threadpool_depth, thread_name_prefix="copyless-job"
        )
        self._futures: dict[int, concurrent.futures.Future[None]] = {}
        self._bytes_converted = 0
        self._buffer_syncs = 0
        self._specs = {s.name: s for s in model.inputs + model.outputs}
        self._finalizer = weakref.finalize(
            self, _shutdown, self._executor, self._engines, self._all_slots, self._trace
        )

    # -- queries ------------------------------------------------------------------------
    def get_tensors_info(
        self, direction: TensorDirection, tensor_type: TensorType | None = None
    ) -> list[NpuTensorInfo]:
        """Infos of the model's inputs or outputs in ``tensor_type`` view (default: option)."""
        self._check_open()
        if not isinstance(direction, TensorDirection):
            raise TypeError(f"direction must be a TensorDirection, got {direction!r}")
        specs = self._model.inputs if direction is TensorDirection.INPUT else self._model.outputs
        view = tensor_type if tensor_type is not None else self._default_view(direction)
        if not isinstance(view, TensorType):
            raise TypeError(f"tensor_type must be a TensorType, got {view!r}")
        return [s.hw if view is TensorType.HW else s.cpu for s in specs]

    def get_tensor_info_by_name(
        self, name: str, tensor_type: TensorType | None = None
    ) -> NpuTensorInfo:
        spec = self._spec(name)
        view = tensor_type if tensor_type is not None else self._default_view(spec.cpu.direction)
        return spec.hw if view is TensorType.HW else spec.cpu

    def get_quant_parameters(self, name: str) -> QuantParameters:
        """The tensor's HW quantization; ``scale=1, zero_point=0`` where there is none."""
        spec = self._spec(name)
        return spec.quant if spec.quant is not None else QuantParameters(1.0, 0)

    def get_num_input_tensors(self) -> int:
        self._check_open()
        return len(self._model.inputs)

    def get_num_output_tensors(self) -> int:
        self._check_open()
        return len(self._model.outputs)

    def get_batch_size(self, direction: TensorDirection | None = None) -> int:
        """The compiled batch size (the same for inputs and outputs)."""
        self._check_open()
        if direction is not None and not isinstance(direction, TensorDirection):
            raise TypeError(f"direction must be a TensorDirection or None, got {direction!r}")
        return self._model.batch_size

    def get_property(self, key: str) -> Any:
        """Backend facts and live counters: backend, device, model, batch_size, partitions,
        jobs_run, fast_calls, jobs_in_flight, bytes_converted, buffer_syncs (dma-buf syncs
        the runner issued), callback_errors,
        engine_threads, async_engine_threads, engines_loaded, trace_events, engine_cache
        (None, or its path and the engines it served and stored), or any option."""
        self._check_open()
        props: dict[str, Any] = {
            "backend": self._backend.name,
            "device": self._backend.device,
            "model": self._model.name,
            "batch_size": self._model.batch_size,
            "partitions": [p.name for p in self._model.partitions],
            "jobs_run": self._jobs.jobs_run + self._fast.count,
            "fast_calls": self._fast.count,
            "jobs_in_flight": self._jobs.in_flight,
            "bytes_converted": self._bytes_converted,
            "buffer_syncs": self._buffer_syncs,
            "callback_errors": self._jobs.callback_errors,
            "engine_threads": self._options.engine_threads(),
            "async_engine_threads": (
                self._options.async_engine_threads()
                if self._async_loader is not None
                else self._options.engine_threads()
            ),
            "trace_events": self._trace.count,
            "engines_loaded": len(self._engines),
            "engine_cache": None if self._engine_cache is None else self._engine_cache.describe(),
            "memory": self._memory,
        }
        if key in props:
            return props[key]
        if hasattr(self._options, key):
            return getattr(self._options, key)
        raise OptionError(f"unknown property {key!r}; known: {', '.join(props)}")

    model = ReadOnly[CompiledModel]("The compiled model this runner executes.")
    options = ReadOnly[RunnerOptions]("The validated options (see README, Runner options).")
    closed = ReadOnly[bool]("Whether :meth:`close` ran.")

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
        if not isinstance(info, NpuTensorInfo):
            raise TensorError(f"info must be an NpuTensorInfo, got {type(info).__name__}")
        check_bounded(info)  # a data-dependent output's info takes the caller's capacity
        if memory_bank is not None and (
            isinstance(memory_bank, bool) or not isinstance(memory_bank, int) or memory_bank != 0
        ):
            raise TensorError(
                f"memory_bank must be None or 0 (host memory has one bank), got {memory_bank!r}"
            )
        gpu = next((device for device in self._memory if device != HOST), None)
        if gpu is not None and info.tensor_type is TensorType.HW:
            device_memory = cuda_memory.allocate_on(gpu, info.size_in_bytes)
            return NpuTensor._wrap_device(info, device_memory)
        memory = HostMemory.shared(info.size_in_bytes, f"copyless:{info.name}", warn_on_leak=False)
        return NpuTensor._wrap_memory(info, memory, MemoryType.XRT_BO)

    def allocate_sub_tensor(self, parent: NpuTensor, info: NpuTensorInfo, offset: int) -> NpuTensor:
        """A view of ``info`` at byte ``offset`` of ``parent``; the parent lives while it does."""
        self._check_open()
        if not isinstance(parent, NpuTensor):
            raise TensorError(f"parent must be an NpuTensor, got {type(parent).__name__}")
        if not isinstance(info, NpuTensorInfo):
            raise TensorError(f"info must be an NpuTensorInfo, got {type(info).__name__}")
        return parent._sub_tensor(info, offset)

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
            status = self._fast(inputs, outputs)
        except Exception as exc:  # noqa: BLE001 - the engine failed in a replayed call
            return self._engine_failed(0, exc)
        if status is not None:
            return status  # type: ignore[no-any-return]
        return self._execute_planned(inputs, outputs)

    def _execute_planned(self, inputs: object, outputs: object) -> StatusCode:
        if self._closed:
            self._log.error("execute on a closed runner")
            return StatusCode.FAILURE
        try:
            plan, cached = self._plan(inputs, outputs)
        except PlanError as exc:
            self._log.error("execute: %s", exc)
            return exc.status
        key = self._jobs.enter_sync(plan.in_ranges, plan.out_ranges)
        if isinstance(key, StatusCode):
            return key
        try:
            status = self._run(plan, 0)
        finally:
            self._jobs.leave_sync(key)
        if cached and status is StatusCode.SUCCESS and not self._closed:
            self._replays.install(
                plan, inputs, outputs, self._acquire_slot, self._free_slots.append
            )
        return status

    def _engine_failed(self, job_id: int, exc: Exception) -> StatusCode:
        if self._closed:
            self._log.warning("job %d cancelled by close(): %s", job_id, exc)
            return StatusCode.FAILURE
        self._log.error("job %d: engine failed: %s", job_id, exc)
        return StatusCode.RUNTIME_ERROR

    def execute_async(
        self,
        inputs: Sequence[Sequence[NpuTensor]],
        outputs: Sequence[Sequence[NpuTensor]],
        callback: Callback | None = None,
    ) -> JobHandle:
        """Submit one batch; returns at once with a job id, or the reason it was refused.

        After :meth:`warm_up` a submit takes microseconds. Without it the first submit also
        loads the async jobs' engines (onnxruntime: tens to hundreds of ms, the model's
        load time) and the first jobs allocate the engines' working memory.
        """
        if self._closed:
            self._log.error("execute_async on a closed runner")
            return JobHandle(StatusCode.FAILURE, 0)
        if callback is not None and not callable(callback):
            self._log.error("execute_async: callback is not callable")
            return JobHandle(StatusCode.INVALID_INPUT, 0)
        try:
            plan, _cached = self._plan(inputs, outputs)
        except PlanError as exc:
            self._log.error("execute_async: %s", exc)
            return JobHandle(exc.status, 0)
        refused = self._load_async_engines()  # a no-op after warm_up() or the first job
        if refused is not None:
            return JobHandle(refused, 0)
        with self._lock:
            if self._closed:
                return JobHandle(StatusCode.FAILURE, 0)
            admitted = self._jobs.admit(plan.in_ranges, plan.out_ranges, callback)
            if not isinstance(admitted, Job):
                return JobHandle(admitted, 0)
            # the job holds its tensors (the caller's lists) until it finishes
            admitted.payload = (plan, inputs, outputs)
            try:
                future = self._executor.submit(self._run_job, admitted)
            except RuntimeError:  # executor shut down concurrently
                self._jobs.finish(admitted, StatusCode.FAILURE)
                return JobHandle(StatusCode.FAILURE, 0)
            self._futures[admitted.job_id] = future
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

    def _run_job(self, job: Job) -> None:
        plan = job.payload[0]
        status = StatusCode.FAILURE
        try:
            if not self._closed:
                status = self._run(plan, job.job_id)
        finally:
            # finish() runs callbacks; the future stays listed until they return, so close()
            # sees (and bounds its wait for) a callback that blocks.
            self._jobs.finish(job, status)
            with self._lock:
                self._futures.pop(job.job_id, None)

    def _load_async_engines(self) -> StatusCode | None:
        """Load the async jobs' engines once; the status to refuse the job with on failure."""
        loader = self._async_loader
        if loader is None or self._async_engines is not None:
            return None
        with self._load_lock:
            if self._async_engines is not None or loader is None:
                return None
            try:
                engines = loader()
            except MemoryError:
                self._log.exception("execute_async: out of memory loading the async engines")
                return StatusCode.OUT_OF_MEMORY
            except Exception as exc:  # noqa: BLE001 - execution never raises
                self._log.error("execute_async: cannot load the async engines: %s", exc)
                return StatusCode.RUNTIME_ERROR
            with self._lock:
                if self._closed:
                    for engine in engines:
                        engine.close()
                    return StatusCode.FAILURE
                self._engines.extend(engines)
                self._async_engines = engines
            return None

    def _run(self, plan: CallPlan, job_id: int) -> StatusCode:
        run_async = job_id != 0 and self._async_engines is not None
        try:
            slot = self._acquire_slot(run_async)  # a new slot allocates its intermediates
        except MemoryError:
            self._log.exception("job %d: out of memory for a new execution slot", job_id)
            return StatusCode.OUT_OF_MEMORY
        except Exception as exc:  # noqa: BLE001 - execution never raises
            self._log.error("job %d: cannot create an execution slot: %s", job_id, exc)
            return StatusCode.RUNTIME_ERROR
        try:
            # Only tensors whose sync does work (dma-bufs) are listed in plan.synced; host
            # memory is cache-coherent. skip_*_bo_sync hands these syncs to the application.
            if plan.synced and not self._options.skip_in_bo_sync:
                self._sync(plan.synced, TensorDirection.INPUT)
            slot.run(plan, self._trace, job_id)
            if plan.synced and not self._options.skip_out_bo_sync:
                self._sync(plan.synced, TensorDirection.OUTPUT)
        except DynamicOutputTooSmall as exc:  # the text only: a record keeping the
            self._log.error("job %d: %s", job_id, str(exc))  # exception keeps its frames
            return StatusCode.INVALID_OUTPUT
        except MemoryError:
            self._log.exception("job %d: out of memory", job_id)
            return StatusCode.OUT_OF_MEMORY
        except Exception as exc:  # noqa: BLE001 - execution never raises
            return self._engine_failed(job_id, exc)
        finally:
            (self._free_async_slots if run_async else self._free_slots).append(slot)
        self._bytes_converted += plan.converted_bytes
        if self._options.debug:
            self._log.debug(
                "job %d: %d frame(s), %d bytes converted, %d tensor(s) bound in place",
                job_id, plan.frames, plan.converted_bytes,
                sum(1 for b in plan.inputs + plan.outputs if b not in plan.staged_inputs
                    and b not in plan.staged_outputs),
            )  # fmt: skip
        return StatusCode.SUCCESS

    def _sync(self, tensors: tuple[NpuTensor, ...], direction: TensorDirection) -> None:
        for tensor in tensors:
            if tensor.info.direction is direction:
                tensor.sync_buffer()
                self._buffer_syncs += 1

    def _plan(self, inputs: Any, outputs: Any) -> tuple[CallPlan, bool]:
        """The call's plan, and whether it came from the cache (a repeated call)."""
        try:
            key = (
                *[id(t) for row in inputs for t in row],
                -1,
                *[id(t) for row in outputs for t in row],
            )
        except TypeError:
            key = ()
        if key:
            with self._plans_lock:
                cached = self._plans.get(key)
                if cached is not None:
                    # A released tensor's id may be reused by a new tensor: its weak
                    # reference says. A closed tensor's memory may be gone: its cached
                    # binding must not be reused.
                    live = cached.tensors
                    if live is not None and not any(t.closed for t in live):
                        return cached, True
                    del self._plans[key]
        try:
            plan = build_plan(
                self._model.inputs,
                self._model.outputs,
                self._model.batch_size,
                inputs,
                outputs,
                self._memory,
            )
        except PlanError:
            raise
        except Exception as exc:  # a broken tensor is bad input: never raise from execute
            raise PlanError(StatusCode.INVALID_INPUT, f"unusable tensor: {exc}") from exc
        if key:
            with self._plans_lock:
                if len(self._plans) >= _PLAN_CACHE_SIZE:
                    self._plans.clear()
                self._plans[key] = plan
        return plan, False

    def _acquire_slot(self, run_async: bool = False) -> Slot:
        pool = self._free_async_slots if run_async else self._free_slots
        try:
            return pool.pop()
        except IndexError:
            engines = self._async_engines if run_async else self._sync_engines
            slot = Slot(self._model, engines or self._sync_engines)
            with self._lock:
                self._all_slots.append(slot)
            return slot

    # -- warm-up ------------------------------------------------------------------------
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
        refused = self._load_async_engines()
        if refused is not None:
            raise ModelLoadError(f"cannot load the async engines: {refused.name} (see the log)")
        run_async = self._async_engines is not None
        count = self._options.max_concurrent_runs
        slots = [(self._acquire_slot(run_async), run_async) for _ in range(count)]
        slots.append((self._acquire_slot(False), False))
        try:
            first_runs(
                self._model, [slot for slot, _ in slots], self.allocate_npu_tensor, self._memory
            )
        finally:
            for slot, is_async in slots:
                (self._free_async_slots if is_async else self._free_slots).append(slot)
        start_workers(self._executor, min(self._options.async_threadpool_depth, count + 1))

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
            futures = dict(self._futures)
        replays_done = self._replays.stop(CLOSE_TIMEOUT_S)  # a replayed call returns first
        syncs_done = self._jobs.close_sync(CLOSE_TIMEOUT_S)  # then the Python path's calls
        for future in futures.values():
            future.cancel()  # queued jobs see _closed and finish as FAILURE
        _done, not_done = concurrent.futures.wait(list(futures.values()), timeout=CLOSE_TIMEOUT_S)
        if not_done:
            self._log.warning(
                "close(): %d job(s) still running after %.0f s", len(not_done), CLOSE_TIMEOUT_S
            )
        for job in self._jobs.pending_jobs():
            if job.job_id in futures and futures[job.job_id].cancelled():
                self._jobs.finish(job, StatusCode.FAILURE)
        path = self._trace.write()
        if path:
            self._log.info("profiling trace written to %s", path)
        with self._plans_lock:
            self._plans.clear()
        if not_done or not replays_done or not syncs_done:
            # A job (or its callback) is still running: releasing the engines and slots it
            # uses would pull memory from under it, and joining its thread would make close()
            # unbounded. Its thread ends when it returns; the engines go with the last
            # reference to them.
            self._finalizer.detach()
            self._executor.shutdown(wait=False, cancel_futures=True)
        else:
            self._finalizer()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<Runner {self._model.name!r} on {self._backend.name}/{self._backend.device} {state}>"
        )

    # -- helpers ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RunnerClosedError(f"runner for {self._model.name!r} is closed")

    def _spec(self, name: str) -> TensorSpec:
        self._check_open()
        try:
            return self._specs[name]
        except (KeyError, TypeError):
            known = ", ".join(self._specs)
            raise UnknownTensorError(f"no tensor named {name!r}; the model has: {known}") from None

    def _default_view(self, direction: TensorDirection) -> TensorType:
        option = (
            self._options.input_tensor_type
            if direction is TensorDirection.INPUT
            else self._options.output_tensor_type
        )
        return TensorType[option]


def _shutdown(
    executor: concurrent.futures.ThreadPoolExecutor,
    engines: list[Engine],
    slots: list[Slot],
    trace: Trace,
) -> None:
    # Module level: the finalizer must not keep the runner alive.
    executor.shutdown(wait=True, cancel_futures=True)
    trace.write()  # a runner never closed still leaves a complete trace file
    for slot in slots:
        slot.close()
    slots.clear()
    for engine in engines:
        engine.close()
    engines.clear()
