"""The Ray Data building block: a callable class whose actors each own a copyless Runner.

::

    plan = plan_resources(2, node_cpus())  # actors that leave the decode tasks a CPU
    ds = ds.map_batches(decode_frames, fn_kwargs={"spec": FrameSpec.for_model(model)},
                        batch_size=32, num_cpus=plan.decode_cpus)
    ds = ds.map_batches(
        Predictor,
        fn_constructor_kwargs={"model": ray.put(model), "top_k": 5},
        compute=ray.data.ActorPoolStrategy(size=plan.actors),
        num_cpus=plan.cpus_per_actor,
        batch_size=32,
        zero_copy_batch=True,
    )
    for batch in watch(iter(ds.iter_batches(batch_size=None))):
        ...

Size the pool with :func:`~copyless.ray.plan_resources`: an actor pool that reserves every
CPU of the cluster starves the decode tasks forever (Ray keeps their demand pending and
says nothing); :func:`~copyless.ray.watch` turns such a stall into a
:class:`~copyless.ray.StallError` naming the demand.

Each actor opens the compiled model once, in its constructor: from a path every node can
read, from a :class:`~copyless.model.CompiledModel` (Ray Data ships constructor arguments
through the object store), or from an ``ObjectRef`` to one (``ray.put(load_model(path))``).

A call takes the batch's frame column (default ``"pixels"``: ``[n, *frame]`` in the model's
HW input view, e.g. ``[n, 224, 224, 4]`` RGBx uint8 for a model compiled with
``input_format="rgbx"``), cuts it into runs of the model's batch size and keeps
``in_flight`` of them running at once with ``execute_async``.

Copies: none of the frames when the column is C-contiguous. With ``zero_copy_batch=True``
Ray Data hands the actor read-only numpy views of the object store, which bind as INPUT
tensors in place; a run shorter than the model's batch size (the batch's tail) is gathered
into the runner's staging buffer. The model's outputs are written by the engine straight
into the arrays the call returns (a tail run is scattered into them).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
from collections.abc import Mapping
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import ray

from ..memory import NpuTensor
from ..model import CompiledModel
from ..runner import Runner, RunnerFactory, batch_axis, frame_shape
from ..types import (
    MemoryType,
    NpuTensorInfo,
    OptionError,
    RunnerType,
    StatusCode,
    TensorDirection,
    TensorType,
    UnsupportedError,
)
from ..vision import softmax_topk

logger = logging.getLogger(__name__)

#: What a Predictor loads: a compiled-model path, the model itself, or an ObjectRef to it.
ModelSource: TypeAlias = "str | os.PathLike[str] | CompiledModel | ray.ObjectRef[CompiledModel]"
Batch = dict[str, npt.NDArray[Any]]

#: A job that has not ended after this long is reported as a failure.
JOB_TIMEOUT_MS = 600_000
_HW = TensorType.HW
_CMA = MemoryType.USER_POINTER_CMA


class PredictionError(RuntimeError):
    """A batch the runner refused or failed; Ray Data reports it as the task's error."""


class Predictor:
    """Runs a compiled model over Ray Data batches; one Runner per actor.

    ``column``: the batch column holding the frames. ``top_k``: None returns the model's
    outputs as columns named after them; an int treats the first output as class logits
    and returns ``class_id``, ``score`` (top-1 probability), ``top_class_ids`` and
    ``top_scores`` (``[n, top_k]``). Rows whose ``error`` column is non-empty (a frame
    that could not be decoded) get ``class_id`` -1 and NaN scores. Every other column of
    the batch (paths, errors) is passed through. ``runner_type``/``options``: as
    ``RunnerFactory``; unless ``options`` says otherwise, ``max_concurrent_runs`` is
    ``in_flight`` and the engine threads are the CPUs Ray reserved for the actor.
    """

    def __init__(
        self,
        model: ModelSource,
        *,
        column: str = "pixels",
        top_k: int | None = None,
        runner_type: RunnerType = RunnerType.VAIML,
        options: Mapping[str, Any] | None = None,
        in_flight: int = 2,
    ) -> None:
        if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
            raise OptionError(f"in_flight must be an int >= 1, got {in_flight!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)):
            raise OptionError(f"top_k must be an int >= 1 or None, got {top_k!r}")
        if top_k is not None and top_k < 1:
            raise OptionError(f"top_k must be an int >= 1 or None, got {top_k!r}")
        self._column = column
        self._top_k = top_k
        self._in_flight = in_flight
        options = _runner_options(options, in_flight)
        self._runner = runner = _open_runner(model, runner_type, options)
        try:
            self._input = _single_input(runner)
            self._outputs = runner.get_tensors_info(TensorDirection.OUTPUT, _HW)
            self._frame = _frame_info(self._input)
            self._out_frames = [_frame_info(info) for info in self._outputs]
        except BaseException:
            runner.close()
            raise
        self._batch = runner.get_batch_size()
        self._quant = runner.get_quant_parameters(self._outputs[0].name)
        self.frames_in_place = 0  #: frames bound without a copy (for tests and stats)
        self.frames_gathered = 0  #: frames copied into staging (a batch's short tail)

    @property
    def runner(self) -> Runner:
        return self._runner

    def __call__(self, batch: Batch) -> Batch:
        frames = self._frames(batch)
        outputs = self.predict(frames)
        result = {key: value for key, value in batch.items() if key != self._column}
        if self._top_k is None:
            result.update(
                {info.name: out for info, out in zip(self._outputs, outputs, strict=True)}
            )
        else:
            result.update(self._classify(outputs[0], batch.get("error")))
        return result

    def predict(self, frames: npt.NDArray[Any]) -> list[npt.NDArray[Any]]:
        """Run ``frames`` (``[n, *frame]``); one ``[n, *out_frame]`` array per output."""
        n = len(frames)
        results = [np.empty((n, *f.shape[1:]), f.data_type.to_numpy()) for f in self._out_frames]
        # Each entry holds a job and its tensors (so the frames and outputs outlive it).
        pending: collections.deque[tuple[Any, ...]] = collections.deque()
        try:
            for start in range(0, n, self._batch):
                stop = min(start + self._batch, n)
                outs = [r[start:stop] for r in results]
                pending.append(self._submit(frames[start:stop], outs))
                if len(pending) >= self._in_flight:
                    self._finish(pending.popleft()[0])
            while pending:
                self._finish(pending.popleft()[0])
        finally:  # after a failure: let the other jobs end before their memory goes
            for job, *_ in pending:
                self._runner.wait(job, JOB_TIMEOUT_MS)
        return results

    def _submit(self, run: npt.NDArray[Any], outs: list[npt.NDArray[Any]]) -> tuple[Any, ...]:
        if len(run) == self._batch:
            inputs = [[NpuTensor(self._input, run, _CMA)]]
            outputs = [
                [NpuTensor(info, o, _CMA) for info, o in zip(self._outputs, outs, strict=True)]
            ]
            self.frames_in_place += len(run)
        else:  # the tail: per-frame tensors, gathered into / scattered out of staging
            inputs = [[NpuTensor(self._frame, run[i : i + 1], _CMA)] for i in range(len(run))]
            outputs = [
                [
                    NpuTensor(f, o[i : i + 1], _CMA)
                    for f, o in zip(self._out_frames, outs, strict=True)
                ]
                for i in range(len(run))
            ]
            self.frames_gathered += len(run)
        job = self._runner.execute_async(inputs, outputs)
        if job.status is StatusCode.SUCCESS:
            return job, inputs, outputs
        raise PredictionError(f"execute_async refused a run of {len(run)}: {job.status.name}")

    def _finish(self, job: Any) -> None:
        status = self._runner.wait(job, JOB_TIMEOUT_MS)
        if status is not StatusCode.SUCCESS:
            raise PredictionError(f"job {job.job_id} ended with {status.name}")

    def _frames(self, batch: Batch) -> npt.NDArray[Any]:
        if self._column not in batch:
            raise PredictionError(
                f"batch has no column {self._column!r} (columns: {', '.join(batch) or 'none'})"
            )
        frames = np.asarray(batch[self._column])
        want = self._frame.shape[1:]
        dtype = self._frame.data_type.to_numpy()
        if frames.shape[1:] != want or frames.dtype != dtype:
            raise PredictionError(
                f"column {self._column!r} holds {frames.dtype} frames of shape "
                f"{list(frames.shape[1:])}; the model takes {dtype} {list(want)} "
                f"({self._input.describe()})"
            )
        if not frames.flags.c_contiguous:
            logger.debug("column %r is not C-contiguous: copied", self._column)
            frames = np.ascontiguousarray(frames)
        return frames

    def _classify(self, logits: npt.NDArray[Any], errors: Any) -> Batch:
        n, k = len(logits), min(self._top_k or 1, int(np.prod(logits.shape[1:])))
        ids = np.full((n, k), -1, np.int64)
        scores = np.full((n, k), np.nan, np.float32)
        for row in range(n):
            if errors is not None and errors[row]:
                continue
            top = softmax_topk(logits, k, self._quant, batch_index=row)
            ids[row] = [class_id for class_id, _ in top]
            scores[row] = [score for _, score in top]
        return {
            "class_id": ids[:, 0].copy(),
            "score": scores[:, 0].copy(),
            "top_class_ids": ids,
            "top_scores": scores,
        }

    def close(self) -> None:
        """Close the runner (an actor's process end does it too, through its finalizer)."""
        self._runner.close()

    def __enter__(self) -> Predictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _runner_options(options: Mapping[str, Any] | None, in_flight: int) -> dict[str, Any]:
    merged = dict(options or {})
    merged.setdefault("max_concurrent_runs", in_flight)
    merged.setdefault("input_tensor_type", "HW")
    merged.setdefault("output_tensor_type", "HW")
    cpus = _reserved_cpus()
    if cpus is not None:
        merged.setdefault("num_threads", max(1, math.ceil(cpus / in_flight)))
    return merged


def _reserved_cpus() -> float | None:
    """The CPUs Ray reserved for this actor, or None outside a Ray worker."""
    if not ray.is_initialized() or ray.get_runtime_context().worker.mode != ray.WORKER_MODE:
        return None
    assigned = ray.get_runtime_context().get_assigned_resources()  # type: ignore[no-untyped-call]
    cpus = assigned.get("CPU")
    return float(cpus) if cpus else None


def _open_runner(model: ModelSource, runner_type: RunnerType, options: dict[str, Any]) -> Runner:
    if isinstance(model, ray.ObjectRef):
        model = ray.get(model)  # one deserialisation per actor
        if not isinstance(model, CompiledModel):
            raise UnsupportedError(f"the ObjectRef holds a {type(model).__name__}, no model")
    if isinstance(model, CompiledModel):
        return RunnerFactory.from_compiled(model, options, runner_type)
    return RunnerFactory.create_runner(model, options, runner_type)


def _single_input(runner: Runner) -> NpuTensorInfo:
    infos = runner.get_tensors_info(TensorDirection.INPUT, _HW)
    if len(infos) != 1:
        raise UnsupportedError(
            f"Predictor runs models with one input; this one has {len(infos)}: "
            + ", ".join(info.describe() for info in infos)
        )
    return infos[0]


def _frame_info(info: NpuTensorInfo) -> NpuTensorInfo:
    """The info of one frame (batch 1) of a HW view whose batch is its first dim."""
    if batch_axis(info) != 0:
        raise UnsupportedError(f"Predictor needs the batch as dim 0; {info.describe()}")
    return dataclasses.replace(info, shape=frame_shape(info))
