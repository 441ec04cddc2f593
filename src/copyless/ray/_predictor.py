"""The Ray Data building block: a callable class whose actors each own a copyless Runner
and one :class:`~copyless.Pipeline` over it.

::

    ds = ray.data.from_items([{"path": p} for p in paths])  # or read_parquet(...) of paths
    ds = ds.map_batches(
        Predictor,
        fn_constructor_kwargs={"model": ray.put(model), "top_k": 5, "decode": "path"},
        compute=ray.data.ActorPoolStrategy(
            size=2, max_concurrent_calls_per_actor=2, enable_true_multi_threading=True
        ),
        num_cpus=1,
        batch_size=32,
    )
    control = JobControl()  # control.stop() from a signal handler: the sources stop
    batches = control.attach(ds).iter_batches(batch_size=None)
    for batch in watch(iter(batches), cancel=control.fail):  # StallError when starved
        ...

Size the pool with :func:`~copyless.ray.plan_resources`: an actor pool that reserves every
CPU of the cluster starves any task beside it (a decode stage, a manifest's read) forever
(Ray keeps their demand pending and says nothing); :func:`~copyless.ray.watch` turns such a
stall into a :class:`~copyless.ray.StallError` naming the demand.

Each actor opens the compiled model once, in its constructor: from a path every node can
read, from a :class:`~copyless.model.CompiledModel` (Ray Data ships constructor arguments
through the object store), or from an ``ObjectRef`` to one (``ray.put(load_model(path))``).

A call takes either a column of image paths (``decode="path"``: each image is decoded, resized
and cropped in the actor, straight into its row of the engine's batch tensor; the model must
take RGBx frames, :meth:`FrameSpec.for_model`) or a column of frames (``column``, default
``"pixels"``: ``[n, *frame]`` in the model's HW input view, e.g. the output of
:func:`~copyless.ray.decode_frames`). Its rows go through the actor's Pipeline (see
:mod:`copyless.ray._stream`): decoding, inference and the top-k of different rows overlap,
within a call and across calls (two at once with ``max_concurrent_calls_per_actor=2``), and a
batch's tail shares a job with the next batch's head.

Copies: a decoded image is written once, by the resize/crop kernel, into the engine's batch
tensor, which a full job binds in place. A frame of a ``pixels`` column is copied once into
that tensor (the Pipeline copies what a row brings at a batch > 1; about 25 us a 224x224
frame). A short job (the end of the data, or a tail no next batch joined within
:data:`~copyless.ray._stream.BATCH_WAIT_MS`) is gathered by the runner into its staging (a
copy). ``frames_in_place``, ``frames_gathered`` and ``frames_copied`` count them. Outputs
are read from the engine's output tensor into the returned columns by ``finish`` (the top-k
only, with ``top_k``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import ray

from ..memory import NpuTensor
from ..model import CompiledModel, record_of
from ..pipeline import ItemTensors
from ..runner import Runner, RunnerFactory, batch_axis, frame_shape
from ..types import (
    NpuTensorInfo,
    OptionError,
    RunnerType,
    TensorDirection,
    TensorType,
    UnsupportedError,
)
from ..vision import class_mask, detections, mask_summary, mask_to_image, softmax_topk, to_image
from ._frames import FrameSpec, Placed, decode_placed
from ._stream import Call, FrameCounts, Item, PredictionStream, RowError, copy_frame

logger = logging.getLogger(__name__)

#: What a Predictor loads: a compiled-model path, the model itself, or an ObjectRef to it.
ModelSource: TypeAlias = "str | os.PathLike[str] | CompiledModel | ray.ObjectRef[CompiledModel]"
Batch = dict[str, npt.NDArray[Any]]

_HW = TensorType.HW


class PredictionError(RuntimeError):
    """A batch the runner refused or failed; Ray Data reports it as the task's error."""


class Predictor:
    """Runs a compiled model over Ray Data batches; one Runner and one Pipeline per actor.

    ``decode``: the column of image paths to decode in the actor (see the module docstring;
    rows whose image cannot be read get an ``error`` message, "" otherwise); None (the
    default): take frames from ``column``; ``max_image_bytes`` bounds the memory one
    decoded image may take (a larger one is an error row; see :class:`FrameSpec`).
    ``task``: ``"detect"`` returns, for each image, ``boxes`` (a list of ``[x0, y0, x1, y1]``
    in the image's pixels), ``scores`` and ``class_ids`` (lists); ``"segment"`` the classes
    of its mask (``class_ids``, most pixels first, and their ``fractions``); the outputs
    are found by the model's task record. ``top_k``: None returns the model's outputs as
    columns named after them; an int treats the first output as class logits and returns
    ``class_id``, ``score`` (top-1 probability), ``top_class_ids`` and ``top_scores``
    (``[n, top_k]``). Rows with an ``error`` (an image that could not be read or decoded)
    do not run: ``class_id`` -1 and NaN scores (zeros in raw output columns). Every other
    column of the batch (paths, errors) is passed through. ``runner_type``/``options``: as
    ``RunnerFactory``; unless ``options`` says otherwise, ``max_concurrent_runs`` is
    ``in_flight`` and the engine threads are the CPUs Ray reserved for the actor.
    ``in_flight`` + 1 jobs' tensors are allocated once (one being prepared while the engine
    runs the others). Calls may come from several threads at once.
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
        decode: str | None = None,
        max_image_bytes: int | None = None,
        task: str | None = None,
    ) -> None:
        if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
            raise OptionError(f"in_flight must be an int >= 1, got {in_flight!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)):
            raise OptionError(f"top_k must be an int >= 1 or None, got {top_k!r}")
        if top_k is not None and top_k < 1:
            raise OptionError(f"top_k must be an int >= 1 or None, got {top_k!r}")
        if decode is not None and not isinstance(decode, str):
            raise OptionError(f"decode must be a column name or None, got {decode!r}")
        if task not in (None, "detect", "segment") or (task is not None and top_k is not None):
            raise OptionError(f"task must be None (top_k or raw outputs), 'detect' or "
                              f"'segment' without top_k; got task={task!r}, top_k={top_k!r}")
        self._column = column
        self._decode = decode
        self._top_k = top_k
        self._task = task
        options = _runner_options(options, in_flight)
        self._runner = runner = _open_runner(model, runner_type, options)
        try:
            self._input = _single_input(runner)
            self._outputs = runner.get_tensors_info(TensorDirection.OUTPUT, _HW)
            self._frame = _frame_info(self._input)
            self._out_frames = [] if task else [_frame_info(info) for info in self._outputs]
            spec = None
            if decode is not None:
                spec = FrameSpec.for_model(runner.model, max_image_bytes)
            roles = _roles(runner, task)
            self._rows = _Rows(spec, top_k, runner.get_quant_parameters(self._outputs[0].name),
                               FrameCounts(runner.get_batch_size()), task, roles)  # fmt: skip
            self._stream = PredictionStream(
                runner, self._rows.prepare, self._rows.finish, slots=in_flight + 1
            )
        except BaseException:
            runner.close()
            raise
        # A Predictor dropped without close() ends its pipeline's thread and its runner
        # (neither refers back to it).
        self._finalizer = weakref.finalize(self, _close, self._stream, runner)

    @property
    def runner(self) -> Runner:
        return self._runner

    @property
    def frames_in_place(self) -> int:
        """Frames run in full jobs: the engine read the batch tensor they were written into."""
        return self._rows.counts.in_place

    @property
    def frames_gathered(self) -> int:
        """Frames run in short jobs, copied by the runner into its staging."""
        return self._rows.counts.gathered

    @property
    def frames_copied(self) -> int:
        """Frames of a ``pixels`` column copied into the engine's batch tensor (0 when the
        actor decodes: the decoder writes there)."""
        return self._rows.counts.copied

    def __call__(self, batch: Batch) -> Batch:
        if self._decode is not None:
            paths = _column(batch, self._decode, "image paths")
            call = self._run(len(paths), enumerate(paths), self._top_k is not None or
                             self._task is not None)  # fmt: skip
            messages = [call.errors.get(i, "") for i in range(len(paths))]
            result = {**batch, "error": np.array(messages, object)}
        else:
            frames = self._frames(batch)
            errors = batch.get("error")
            good = (i for i in range(len(frames)) if errors is None or not errors[i])
            rows = ((i, frames[i]) for i in good)
            call = self._run(len(frames), rows, self._top_k is not None or
                             self._task is not None)  # fmt: skip
            result = {key: value for key, value in batch.items() if key != self._column}
        result.update(call.arrays)
        return result

    def predict(self, frames: npt.NDArray[Any]) -> list[npt.NDArray[Any]]:
        """Run ``frames`` (``[n, *frame]``); one ``[n, *out_frame]`` array per output."""
        frames = self._check_frames(np.asarray(frames))
        call = self._run(len(frames), enumerate(frames), False)
        return list(call.arrays.values())

    def _run(self, n: int, rows: Iterator[tuple[int, Any]], classify: bool) -> Call:
        call = Call(self._arrays(n, classify), classify)
        self._stream.run(call, rows)
        if call.failure is not None:
            raise PredictionError(f"a batch of {n} failed: {call.failure}") from call.failure
        return call

    def _arrays(self, n: int, classify: bool) -> Batch:
        if self._task is not None:  # one list a row: the boxes, or the mask's classes
            names = TASK_COLUMNS[self._task]
            return {name: np.empty(n, object) for name in names}
        if not classify:
            return {info.name: np.zeros((n, *f.shape[1:]), f.data_type.to_numpy())
                    for info, f in zip(self._outputs, self._out_frames, strict=True)}  # fmt: skip
        k = min(self._top_k or 1, math.prod(self._out_frames[0].shape[1:]))
        return {
            "class_id": np.full(n, -1, np.int64),
            "score": np.full(n, np.nan, np.float32),
            "top_class_ids": np.full((n, k), -1, np.int64),
            "top_scores": np.full((n, k), np.nan, np.float32),
        }

    def _frames(self, batch: Batch) -> npt.NDArray[Any]:
        return self._check_frames(np.asarray(_column(batch, self._column, "frames")))

    def _check_frames(self, frames: npt.NDArray[Any]) -> npt.NDArray[Any]:
        want = self._frame.shape[1:]
        dtype = self._frame.data_type.to_numpy()
        if frames.shape[1:] != want or frames.dtype != dtype:
            raise PredictionError(
                f"column {self._column!r} holds {frames.dtype} frames of shape "
                f"{list(frames.shape[1:])}; the model takes {dtype} {list(want)} "
                f"({self._input.describe()})"
            )
        return frames

    def close(self) -> None:
        """Let the rows queued end, free the pipeline and close the runner (also done when
        the Predictor is dropped, or its actor's process ends). Idempotent."""
        self._finalizer()

    def __enter__(self) -> Predictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclasses.dataclass(frozen=True, slots=True)
class _Rows:
    """``prepare`` and ``finish`` for the actor's pipeline (kept apart from the Predictor,
    whose finalizer would otherwise be kept from running by the pipeline's threads)."""

    spec: FrameSpec | None
    top_k: int | None
    quant: Any
    counts: FrameCounts

    task: str | None = None
    roles: dict[str, int] = dataclasses.field(default_factory=dict)  # role -> output index
    placed: dict[tuple[int, int], Placed] = dataclasses.field(default_factory=dict)

    def prepare(self, item: Item, inputs: ItemTensors) -> None:
        if isinstance(item.source, np.ndarray):
            copy_frame(item.source, inputs)
        else:
            assert self.spec is not None  # a path only reaches here with decode set
            message, placed = decode_placed(item.source, inputs[0], self.spec, 0)
            if message:
                raise RowError(message)
            if self.task is not None:  # where the image went: finish maps the answer back
                self.placed[(id(item.call), item.index)] = placed
        self.counts.row(inputs.row, isinstance(item.source, np.ndarray))

    def finish(self, item: Item, outputs: ItemTensors) -> None:
        arrays, row = item.call.arrays, item.index
        if self.task is not None:
            placed = self.placed.pop((id(item.call), row), None)
            if self.task == "detect":
                _detections_row(arrays, row, outputs, self.roles, placed)
            else:
                _mask_row(arrays, row, outputs[self.roles["mask"]], placed)
            return
        if not item.call.classify:
            for array, tensor in zip(arrays.values(), outputs, strict=True):
                np.copyto(array[row], tensor.numpy()[0])
            return
        top = softmax_topk(outputs[0].numpy(), self.top_k or 1, self.quant)
        arrays["top_class_ids"][row] = [class_id for class_id, _ in top]
        arrays["top_scores"][row] = [score for _, score in top]
        arrays["class_id"][row], arrays["score"][row] = top[0]


#: The columns a call returns per task (object arrays: one list a row).
TASK_COLUMNS = {
    "detect": ("boxes", "scores", "class_ids"),
    "segment": ("class_ids", "fractions"),
}


def _roles(runner: Runner, task: str | None) -> dict[str, int]:
    """Role -> output index for ``task`` from the model's task record (UnsupportedError
    when the record names no such outputs)."""
    if task is None:
        return {}
    record = record_of(runner.model)
    names = [o.name for o in runner.get_tensors_info(TensorDirection.OUTPUT, _HW)]
    wanted = ("boxes", "scores", "classes") if task == "detect" else ("mask",)
    roles = dict(record.roles)
    if task == "segment" and "mask" not in roles:
        roles["mask"] = roles.get("class_scores", "")
    missing = [r for r in wanted if roles.get(r) not in names]
    if record.task != task or missing:
        raise UnsupportedError(f"Predictor(task={task!r}): the model's task record says "
                               f"{record.task!r} with outputs {dict(record.roles)}")  # fmt: skip
    return {role: names.index(roles[role]) for role in wanted}


def _detections_row(arrays: Batch, row: int, outputs: ItemTensors, roles: dict[str, int],
                    placed: Placed) -> None:  # fmt: skip
    """A detector's rows for one image, in the image's pixels, as lists."""
    scores = outputs[roles["scores"]]
    shape = scores.produced_shape
    count = shape[0] if shape else scores.info.shape[0]
    found = detections(outputs[roles["boxes"]], scores, outputs[roles["classes"]], (),
                       count=count)  # fmt: skip
    if placed is not None:
        found = to_image(found, placed[0])
    arrays["boxes"][row] = [[d.box.x0, d.box.y0, d.box.x1, d.box.y1] for d in found]
    arrays["scores"][row] = [d.box.score for d in found]
    arrays["class_ids"][row] = [d.class_id for d in found]


def _mask_row(arrays: Batch, row: int, output: NpuTensor, placed: Placed) -> None:
    """A segmenter's classes for one image (the mask mapped to the image where it was
    letterboxed or stretched), most pixels first, with their share of the pixels."""
    mask = class_mask(output)
    if placed is not None:
        mask = mask_to_image(mask, placed[0], placed[1])
    found = mask_summary(mask, ())
    arrays["class_ids"][row] = [c.class_id for c in found]
    arrays["fractions"][row] = [c.fraction for c in found]


def _close(stream: PredictionStream, runner: Runner) -> None:
    try:
        stream.close()
    finally:
        runner.close()


def _column(batch: Batch, name: str, what: str) -> npt.NDArray[Any]:
    if name not in batch:
        raise PredictionError(
            f"batch has no column {name!r} of {what} (columns: {', '.join(batch) or 'none'})"
        )
    return batch[name]


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
