"""One served model: its runner, its :class:`~copyless.Pipeline` (the dynamic batcher) and
the bounded queue in front of it.

One version of one model: the repository (:mod:`._repository`) keeps a ServedModel per
version it serves, and replaces one by loading its successor first.

Dynamic batching is the pipeline's own: the model's rows are one endless source of
``Pipeline.map_sources``, run at the model's compiled batch size with ``batch_wait_ms`` =
``max_queue_delay_ms`` (the model's config.pbtxt, else the server's: a batch waits at most
that long for more rows once it has one; 0 runs what is there). In front of the pipeline, a
queue of at most ``max_queue_size`` rows: a request that does not fit is refused whole, with
503 / RESOURCE_EXHAUSTED, so memory never grows with the load. A request of ``k`` rows is
``k`` items (:mod:`._pending`).

Queue policy (Triton's schedule-policy extension): the queue has the model's priority levels
(1 first; a request's ``priority`` 0 takes the default level) and a request may carry a
``timeout`` (microseconds in the queue; the model's policy may set a default and forbid
overriding it): a row still queued past its request's deadline is not run, and the request
is refused with 408 / DEADLINE_EXCEEDED. A request whose client went away is dropped before
its rows run.

Copies: an input row is written into the pipeline's batch tensor once (from the request's
bytes, or straight from a shared-memory region with ``preadv``); an output row is read out
once (into the response's array, or into a region with ``pwritev``).
"""

from __future__ import annotations

import collections
import concurrent.futures
import enum
import logging
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..model import precision_line
from ..pipeline import ItemTensors, Pipeline
from ..runner import Runner, RunnerFactory
from ..types import CopylessError, NpuTensorInfo, TensorDirection, TensorType
from ..vision import ReadLimit, preparer_for
from ._admit import ModelShape, admit
from ._errors import Refusal, RequestError
from ._images import ImageInput
from ._layout import ModelPolicy
from ._metrics import ServeMetrics
from ._pending import PendingRequest, RowItem, flat_bytes
from ._regions import RegionTable
from ._request import InferRequest, InferResponse
from ._settings import ServeSettings
from ._tensors import ServedTensor, served_tensors

__all__ = ["VERSION", "Lifecycle", "ModelRetired", "ModelState", "Served", "ServedModel"]

logger = logging.getLogger(__name__)

#: The version of a model in the flat layout (a folder holding the model itself).
VERSION = "1"


class Served(Protocol):
    """What the repository, the service and the protocols need of a served version: a
    :class:`ServedModel` (a compiled model) or a chain of them (:mod:`._chain`)."""

    name: str
    version: str
    policy: ModelPolicy
    max_batch_size: int

    @property
    def state(self) -> ModelState: ...
    @property
    def reason(self) -> str: ...
    @property
    def ready(self) -> bool: ...
    @property
    def engine(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def shape(self) -> ModelShape: ...
    def load(self) -> None: ...
    def check_ready(self) -> None: ...
    def submit(self, request: InferRequest, regions: RegionTable
               ) -> concurrent.futures.Future[InferResponse]: ...  # fmt: skip
    def metadata(self, versions: list[str] | None = None) -> dict[str, Any]: ...
    def config(self) -> dict[str, Any]: ...
    def retire(self) -> None: ...
    def drain(self, timeout_s: float) -> None: ...


class ModelRetired(RequestError):
    """The version a request was routed to is being replaced or unloaded: route it again."""


class ModelState(enum.Enum):
    """As Triton's repository index names them."""

    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    UNLOADING = "UNLOADING"


class Lifecycle:
    """What every served thing (a model, a chain) shares: its state and why, readiness
    published to the metrics, and the shape requests are checked against. The subclass
    sets ``name``, ``version``, ``_metrics``, ``_state``, ``_reason`` and ``_shape``."""

    name: str
    version: str
    _metrics: ServeMetrics
    _state: ModelState
    _reason: str
    _shape: ModelShape

    @property
    def state(self) -> ModelState:
        return self._state

    @property
    def reason(self) -> str:
        """Why it is not ready ('' when it is)."""
        return self._reason

    @property
    def ready(self) -> bool:
        return self._state is ModelState.READY

    @property
    def shape(self) -> ModelShape:
        """What a request is checked against (its tensors and batch; empty until loaded)."""
        return self._shape

    def check_ready(self) -> None:
        if self._state is not ModelState.READY:
            raise RequestError(Refusal.UNAVAILABLE, f"model {self.name!r} is not ready: "
                               f"{self._reason}")  # fmt: skip

    def _set_state(self, state: ModelState, reason: str = "") -> None:
        self._state, self._reason = state, reason
        self._metrics.ready(self.name, self.version, state is ModelState.READY)


class ServedModel(Lifecycle):
    """A model of the repository (see the module docstring). ``load()`` runs on the
    repository's loading thread; ``submit()`` from any thread."""

    def __init__(self, name: str, path: Path, settings: ServeSettings, metrics: ServeMetrics,
                 version: str = VERSION, policy: ModelPolicy | None = None) -> None:  # fmt: skip
        self.name, self.path, self.version = name, path, version
        self.policy = policy or ModelPolicy()
        self._settings, self._metrics = settings, metrics
        self._state, self._reason = ModelState.LOADING, "loading"
        self._runner: Runner | None = None
        self._pipeline: Pipeline | None = None
        self.inputs: list[ServedTensor] = []
        self.outputs: list[ServedTensor] = []
        self.max_batch_size = 0
        self._shape = ModelShape(name, version, [], [], 0)
        self.images: dict[str, ImageInput] = {}
        self._levels = max(1, self.policy.priority_levels)
        self._queues: list[collections.deque[RowItem]] = [collections.deque()
                                                          for _ in range(self._levels)]
        self._queued = 0
        self._capacity = 0
        self._cond = threading.Condition()
        self._closing = False
        self._retired = False
        self._consumer: threading.Thread | None = None
        self._local = threading.local()
        metrics.add_model(name, version)

    # -- state (Lifecycle's) ---------------------------------------------------------------
    @property
    def engine(self) -> str:
        return str(self._runner.get_property("engine")) if self._runner is not None else ""

    @property
    def precision(self) -> str:
        """What the model's reduced precision costs, as its compiler measured it (the line
        every app prints: ``int8 model: top-1 as fp32 on ...``); '' for an fp32 model or one
        not loaded."""
        if self._runner is None:
            return ""
        return precision_line(self._runner.model.metadata) or ""

    # -- loading -------------------------------------------------------------------------
    def load(self) -> None:
        """Create the runner and the pipeline and start taking requests; a failure leaves
        the model UNAVAILABLE with the reason (logged), never raises."""
        try:
            runner = RunnerFactory.create_runner(self.path, dict(self._settings.runner_options),
                                                 self._settings.runner_type)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the model's state carries it
            logger.error("model %r (%s) failed to load: %s", self.name, self.path, exc)
            self._set_state(ModelState.UNAVAILABLE, f"failed to load: {exc}")
            return
        try:
            self._start(runner)
        except Exception as exc:  # noqa: BLE001 - the model's state carries it
            runner.close()
            logger.error("model %r cannot be served: %s", self.name, exc)
            self._set_state(ModelState.UNAVAILABLE, f"cannot be served: {exc}")
            return
        logger.info("model %r ready on %s (batch %d)", self.name, self.engine,
                    runner.get_batch_size())  # fmt: skip

    def _start(self, runner: Runner) -> None:
        ins = runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW)
        outs = runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW)
        batch = runner.get_batch_size()
        self.inputs, self.outputs, self.max_batch_size = served_tensors(
            ins, outs, list(runner.model.outputs), batch)
        self.images = _image_inputs(runner, ins, self._settings.max_image_bytes)
        self._shape = ModelShape(self.name, self.version, self.inputs, self.outputs,
                                 self.max_batch_size, self.images)  # fmt: skip
        runner.warm_up()
        self._pipeline = Pipeline(runner, self._prepare, self._finish, slots=self._settings.slots,
                                  batch=batch, batch_wait_ms=self.max_queue_delay_ms)
        self._runner = runner
        self._capacity = self.policy.max_queue_size or self._settings.queue_size(batch)
        self._consumer = threading.Thread(target=self._consume, args=(self._pipeline,),
                                          daemon=True,
                                          name=f"copyless-serve-{self.name}")  # fmt: skip
        self._consumer.start()
        self._set_state(ModelState.READY)

    @property
    def max_queue_delay_ms(self) -> float:
        delay = self.policy.max_queue_delay_ms
        return self._settings.max_queue_delay_ms if delay is None else delay

    # -- requests ------------------------------------------------------------------------
    def submit(self, request: InferRequest, regions: RegionTable
               ) -> concurrent.futures.Future[InferResponse]:  # fmt: skip
        """Check ``request`` and queue its rows; the future resolves with the response or a
        :class:`RequestError`. Raises :class:`RequestError` for a request refused at once
        (:class:`ModelRetired` when this version is being replaced: route it again)."""
        self.check_ready()
        try:
            level, timeout_us = self._schedule(request)
            pending = admit(self._shape, request, regions)
        except RequestError:
            self._metrics.request_failed(self.name, self.version, "OTHER", 0.0)
            raise
        now = time.perf_counter()
        pending.deadline = now + timeout_us / 1e6 if timeout_us else None
        with self._cond:
            refusal: RequestError | None = None
            if self._retired:
                refusal = ModelRetired(Refusal.UNAVAILABLE, f"model {self.name!r} version "
                                       f"{self.version} is being replaced")  # fmt: skip
            elif self._closing:
                refusal = RequestError(Refusal.UNAVAILABLE, "the server is shutting down")
            elif self._queued + pending.rows > self._capacity:
                refusal = RequestError(Refusal.EXHAUSTED, (
                    f"model {self.name!r} is busy: its queue holds {self._queued} of "
                    f"{self._capacity} rows and this request has {pending.rows}; retry later"))
            else:
                self._queues[level - 1].extend(RowItem(pending, r, now)
                                               for r in range(pending.rows))  # fmt: skip
                self._queued += pending.rows
                self._cond.notify_all()
        if refusal is not None:
            pending.release()
            if not isinstance(refusal, ModelRetired):
                self._metrics.request_failed(self.name, self.version, "REJECTED", 0.0)
            raise refusal
        self._metrics.pending(self.name, self.version, +1)
        return pending.future

    def _schedule(self, request: InferRequest) -> tuple[int, int]:
        """``(level, timeout_us)`` of a request, from its parameters and the policy."""
        policy = self.policy
        priority, timeout = request.priority, request.timeout_us
        if priority and not 1 <= priority <= self._levels:
            levels = (f"its priority levels are 1 to {self._levels}" if policy.priority_levels
                      else "it has one priority level (config.pbtxt's "
                      "dynamic_batching.priority_levels sets more)")  # fmt: skip
            raise RequestError.invalid(f"priority {priority} is not one of model "
                                       f"{self.name!r}'s: {levels}; 0 is the default")
        level = priority or policy.default_priority or self._levels
        return level, policy.timeout_us(timeout)

    def _rows(self) -> Iterator[RowItem]:
        """The pipeline's source: queued rows, highest priority first, until the model
        drains; a row whose request timed out or was abandoned is answered here instead."""
        while True:
            with self._cond:
                while not self._queued and not self._closing:
                    self._cond.wait()
                if not self._queued:
                    return
                row = next(q for q in self._queues if q).popleft()
                self._queued -= 1
            request = row.request
            if request.deadline is not None and time.perf_counter() > request.deadline:
                waited = time.perf_counter() - row.queued_at
                if request.row_failed(RequestError(Refusal.TIMEOUT, "Request timeout expired: "
                                                   f"queued {waited * 1e3:.1f} ms")):
                    self._answered(request, "REJECTED")  # Triton counts timeouts so
                continue
            if request.abandoned:
                if request.row_failed(RequestError(Refusal.UNAVAILABLE, "the client went away")):
                    self._answered(request, "CANCELED")
                continue
            yield row

    # -- the pipeline's callbacks (worker threads) ---------------------------------------
    def _prepare(self, item: RowItem, inputs: ItemTensors) -> None:
        local = self._local
        if inputs.row == 0:
            local.rows = 0
        request = item.request
        if request.abandoned:
            raise RequestError(Refusal.UNAVAILABLE, "the client went away")
        item.queued_at = time.perf_counter() - item.queued_at  # from now on: seconds queued
        for source, tensor in zip(request.inputs, inputs, strict=True):
            view = tensor.numpy()
            if source.array is not None:
                np.copyto(_flat(view), source.array[item.row])
            elif source.region is not None:
                source.region.read_into(flat_bytes(view),
                                        source.offset + item.row * source.tensor.row_bytes,
                                        f"input {source.tensor.name!r}")  # fmt: skip
            elif source.images is not None and source.decoder is not None:
                source.decoder.write(source.images[item.row], tensor,
                                     f"input {source.tensor.name!r}: image {item.row}")
        local.rows += 1

    def _finish(self, item: RowItem, outputs: ItemTensors) -> None:
        if outputs.row == 0:
            self._metrics.batch(self.name, self.version, getattr(self._local, "rows", 1))
        request, row = item.request, item.row
        for target, tensor in zip(request.outputs, outputs, strict=True):
            if target.wish is None:
                continue
            flat = _flat(tensor.numpy())
            if target.tensor.dynamic:
                target.shape = tuple(tensor.produced_shape or tensor.info.shape)
                flat = flat[: math.prod(target.shape)]
                if target.region is None:
                    target.array = flat.copy()
                    continue
                if flat.nbytes > target.capacity:
                    raise RequestError.invalid(
                        f"output {target.tensor.name!r}: {flat.nbytes} bytes do not fit the "
                        f"{target.capacity} bytes given in region {target.region.name!r}")
            if target.region is not None:
                target.region.write_from(flat_bytes(flat),
                                         target.offset + row * target.tensor.row_bytes,
                                         f"output {target.tensor.name!r}")  # fmt: skip
            elif target.array is not None:
                target.array[row] = flat
        if request.row_done():
            self._answered(request, None)

    def _answered(self, request: PendingRequest, reason: str | None) -> None:
        self._metrics.answered(self.name, self.version, request.received, reason)
        request.resolve()

    # -- the consumer thread -------------------------------------------------------------
    def _consume(self, pipeline: Pipeline) -> None:
        try:
            for result in pipeline.map_sources({self.name: self._rows()}):
                item: RowItem | None = result.item
                if item is None:
                    continue
                if result.error is None:
                    self._metrics.row(self.name, self.version, item.queued_at, result.timings)
                    continue
                request = item.request
                if request.row_failed(result.error):
                    self._answered(request, _reason(result.error, request))
        except Exception as exc:
            logger.error("model %r stopped: %s", self.name, exc, exc_info=exc)
            self._set_state(ModelState.UNAVAILABLE, f"stopped: {exc}")
        self._fail_queued(RequestError(Refusal.UNAVAILABLE, f"model {self.name!r} stopped"))

    def _fail_queued(self, error: RequestError) -> None:
        with self._cond:
            self._closing = True
            rows = [row for queue in self._queues for row in queue]
            for queue in self._queues:
                queue.clear()
            self._queued = 0
        for item in rows:
            if item.request.row_failed(error):
                self._answered(item.request, "OTHER")

    # -- metadata ------------------------------------------------------------------------
    def metadata(self, versions: list[str] | None = None) -> dict[str, Any]:
        """The protocol's model metadata: the HW view of each tensor; ``versions``: the
        model's versions served (default: this one)."""
        def tensors(served: list[ServedTensor]) -> list[dict[str, Any]]:
            return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                    for t in served]  # fmt: skip

        return {"name": self.name, "versions": versions or [self.version],
                "platform": "copyless", "inputs": tensors(self.inputs),
                "outputs": tensors(self.outputs)}  # fmt: skip

    def config(self) -> dict[str, Any]:
        """Triton's model configuration (its JSON form), as far as it applies."""
        def tensors(served: list[ServedTensor]) -> list[dict[str, Any]]:
            return [{"name": t.name, "data_type": f"TYPE_{t.datatype}",
                     "dims": list(t.rest if t.batched else t.shape)}
                    for t in served]  # fmt: skip

        policy = self.policy
        config: dict[str, Any] = {
            "name": self.name, "platform": "copyless", "backend": self.engine,
            "max_batch_size": self.max_batch_size,
            "input": tensors(self.inputs), "output": tensors(self.outputs),
            "version_policy": ({"all": {}} if policy.versions == "all" else
                               {"specific": {"versions": list(policy.specific)}}
                               if policy.versions == "specific" else
                               {"latest": {"num_versions": policy.latest}}),
        }  # fmt: skip
        if self.images:  # Triton's config has no word for it: a parameter says which
            config["parameters"] = {"encoded_image_inputs": {
                "string_value": ",".join(sorted(self.images))}}
        if self.max_batch_size:
            config["dynamic_batching"] = {
                "max_queue_delay_microseconds": int(self.max_queue_delay_ms * 1000),
                "priority_levels": policy.priority_levels,
                "default_priority_level": policy.default_priority,
                "default_queue_policy": {
                    "max_queue_size": self._capacity,
                    "default_timeout_microseconds": policy.default_timeout_us,
                    "allow_timeout_override": policy.allow_timeout_override,
                },
            }  # fmt: skip
        parameters = self._parameters()
        if parameters:
            config["parameters"] = {**config.get("parameters", {}), **parameters}
        return config

    def _parameters(self) -> dict[str, Any]:
        """Triton's config parameters: the precision line, and the quantization of each
        integer view (``quantization/NAME``: ``scale=S zero_point=Z``, how a client reads an
        INT8 output: ``(q - Z) * S``)."""
        if self._runner is None:
            return {}
        model = self._runner.model
        found: dict[str, Any] = {}
        if self.precision:
            found["precision"] = {"string_value": self.precision}
        for spec in (*model.inputs, *model.outputs):
            if spec.quant is not None and not spec.hw.data_type.is_float:
                value = f"scale={spec.quant.scale!r} zero_point={spec.quant.zero_point}"
                found[f"quantization/{spec.name}"] = {"string_value": value}
        return found

    # -- the end -------------------------------------------------------------------------
    def retire(self) -> None:
        """Take no new request (they are routed to the successor: :class:`ModelRetired`);
        the queued and running ones are answered by :meth:`drain`."""
        with self._cond:
            self._retired = True

    def drain(self, timeout_s: float) -> None:
        """Take no more requests, answer the queued and running ones (at most
        ``timeout_s``), then close the pipeline and the runner."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._state is ModelState.READY:
            self._set_state(ModelState.UNLOADING, "the server is shutting down")
        if self._consumer is not None:
            self._consumer.join(timeout_s)
        self._fail_queued(RequestError(Refusal.UNAVAILABLE, "the server is shutting down"))
        if self._pipeline is not None:
            self._pipeline.close()
        if self._runner is not None:
            self._runner.close()


def _image_inputs(runner: Runner, infos: list[NpuTensorInfo],
                  max_image_bytes: int) -> dict[str, ImageInput]:  # fmt: skip
    """The inputs that take encoded images: the photo-shaped ones of a model whose
    preprocessing record is complete (a guess would make answers silently wrong)."""
    found = {}
    limit = ReadLimit(max_image_bytes, "the server allows an image (--max-image-mb)")
    for info in infos:
        try:
            preparer = preparer_for(runner, info)
        except (CopylessError, ValueError):
            continue
        if not preparer.assumed:
            found[info.name] = ImageInput(preparer, limit)
    return found


def _flat(view: np.ndarray) -> np.ndarray:
    if not view.flags.c_contiguous:
        raise RequestError(Refusal.INTERNAL, "a tensor row is not contiguous")
    return view.reshape(-1)


def _reason(error: BaseException, request: PendingRequest) -> str:
    if request.abandoned:
        return "CANCELED"
    if isinstance(error, RequestError) and error.refusal is not Refusal.INTERNAL:
        return "OTHER"
    return "BACKEND"


