"""The copyless pipelines: the same compiled RGBx model on each backend, sync and async.

Every copyless pipeline prepares frames as copyless-zerocopy does (apps/_prepare.py: the
compiled model's recorded preprocessing), and decodes per frame, when the benchmark does,
with ``copyless.vision.decode`` at the smallest libjpeg-turbo DCT scale the resize needs.

* ``copyless-<backend>-zc`` (zero-copy): tensors in the HW view, allocated by the runner.
  ``copyless.vision`` preprocesses each frame in one fused pass straight into the packed
  RGBx uint8 input; the engine reads that memory and writes the output tensor in place;
  ``softmax_topk`` / ``text_boxes`` read the output in place. No copy of a frame anywhere:
  copyless-zerocopy's loop, batched.
* ``copyless-<backend>-cpu`` (non-zero-copy): the same model with tensors in the CPU view
  (float32 NCHW pixels in, float out): preprocess writes planar float and the runner
  converts it into the HW view inside ``execute`` (one conversion copy per input and
  output).
* ``copyless-<backend>-async<S>``: the zero-copy pipeline with ``max_concurrent_runs=S``
  job slots, pipelined: while the oldest job runs, the next frame is preprocessed into the
  next slot's input; a slot's output is postprocessed after ``wait`` on its job.

``<backend>`` is ``ort`` (RunnerType.ONNXRUNTIME) or ``ov`` (RunnerType.OPENVINO); runner
options are copyless's defaults except ``inference_precision`` when ``--ov-precision`` sets
one, and ``engine_spinning`` for the sync pipelines: they spin within each run as
copyless-zerocopy does (and as the plain pipeline's and engine-ort's onnxruntime defaults
do), unless ``--no-spin``. The async pipelines keep the default (their jobs run one engine
thread each on a machine of up to ``max_concurrent_runs`` cores).
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...memory import NpuTensor
from ...runner import Runner, RunnerFactory
from ...types import (
    CopylessError,
    JobHandle,
    QuantParameters,
    RunnerType,
    StatusCode,
    TensorDirection,
    TensorType,
)
from .._prepare import Preparer, preparer_for
from .pipeline import FAMILY_COPYLESS, Pipeline
from .stages import Stopwatch
from .tasks import Outcome, Photo, Task

BACKENDS = {"ort": RunnerType.ONNXRUNTIME, "ov": RunnerType.OPENVINO}


class _JobBuffers:
    """One job slot's tensors: the input, the output and where the frames landed."""

    def __init__(self, runner: Runner, view: TensorType) -> None:
        (in_info,) = runner.get_tensors_info(TensorDirection.INPUT, view)
        (out_info,) = runner.get_tensors_info(TensorDirection.OUTPUT, view)
        self.x: NpuTensor = runner.allocate_npu_tensor(in_info)
        self.y: NpuTensor = runner.allocate_npu_tensor(out_info)
        self.prepare: Preparer = preparer_for(runner, in_info)
        integer = np.issubdtype(out_info.numpy_dtype, np.integer)
        self.quant: QuantParameters | None = (
            runner.get_quant_parameters(out_info.name) if integer else None
        )
        self.inputs, self.outputs = [[self.x]], [[self.y]]
        self.placements: list[Any] = []

    def decode(self, photo: Photo, batch: int) -> list[npt.NDArray[np.uint8]]:
        if not photo.per_frame:
            return [photo.pixels] * batch
        return [self.prepare.decode(photo.data) for _ in range(batch)]

    def preprocess(self, photo: Photo, images: list[npt.NDArray[np.uint8]]) -> None:
        full = (photo.pixels.shape[0], photo.pixels.shape[1])
        self.placements = [self.prepare(im, self.x, i, full) for i, im in enumerate(images)]

    def postprocess(self, task: Task, batch: int) -> Outcome:
        outcomes = [
            task.copyless_postprocess(self.y, self.quant, self.placements[i], i)
            for i in range(batch)
        ]
        return outcomes[0]


def _runner(model: Path, backend: str, view: str, slots: int, precision: str | None,
            spin: bool = False) -> Runner:  # fmt: skip
    options: dict[str, Any] = {
        "input_tensor_type": view, "output_tensor_type": view, "max_concurrent_runs": slots,
        "engine_spinning": spin,
    }  # fmt: skip
    if precision is not None and backend == "ov":
        options["inference_precision"] = precision
    return RunnerFactory.create_runner(model, options, BACKENDS[backend])


def sync(model: Path, task: Task, photo: Photo, batch: int, backend: str, zero_copy: bool,
         precision: str | None, spin: bool = True) -> Pipeline:  # fmt: skip
    view = TensorType.HW if zero_copy else TensorType.CPU
    runner = _runner(model, backend, view.name, 1, precision, spin)
    slot = _JobBuffers(runner, view)
    watch = Stopwatch()

    def run(batches: int) -> Outcome:
        outcome = Outcome()
        for _ in range(batches):
            watch.start()
            images = slot.decode(photo, batch)
            if photo.per_frame:  # else decoded once: nothing to time
                watch.lap("decode")
            slot.preprocess(photo, images)
            watch.lap("preprocess")
            status = runner.execute(slot.inputs, slot.outputs)
            watch.lap("infer")
            if status is not StatusCode.SUCCESS:
                raise CopylessError(f"execute returned {status.name}")
            outcome = slot.postprocess(task, batch)
            watch.lap("postprocess")
            watch.frames(batch)
        return outcome

    name = f"copyless-{backend}-{'zc' if zero_copy else 'cpu'}"
    return Pipeline(name, FAMILY_COPYLESS, False, run, runner.close, watch=watch, engine=backend)


def pipelined(model: Path, task: Task, photo: Photo, batch: int, backend: str, slots: int,
              precision: str | None) -> Pipeline:  # fmt: skip
    runner = _runner(model, backend, "HW", slots, precision)
    ring = [_JobBuffers(runner, TensorType.HW) for _ in range(slots)]

    def run(batches: int) -> Outcome:
        in_flight: collections.deque[tuple[_JobBuffers, JobHandle]] = collections.deque()
        outcome = Outcome()
        for index in range(batches):
            slot = ring[index % slots]
            if len(in_flight) == slots:  # steady state: the oldest job frees this slot
                outcome = _collect(runner, task, batch, *in_flight.popleft())
            slot.preprocess(photo, slot.decode(photo, batch))  # overlaps the running jobs
            handle = runner.execute_async(slot.inputs, slot.outputs)
            if handle.status is not StatusCode.SUCCESS:
                raise CopylessError(f"execute_async returned {handle.status.name}")
            in_flight.append((slot, handle))
        while in_flight:  # drain
            outcome = _collect(runner, task, batch, *in_flight.popleft())
        return outcome

    name = f"copyless-{backend}-async{slots}"
    return Pipeline(name, FAMILY_COPYLESS, True, run, runner.close, engine=backend)


def _collect(
    runner: Runner, task: Task, batch: int, slot: _JobBuffers, handle: JobHandle
) -> Outcome:
    status = runner.wait(handle, -1)
    if status is not StatusCode.SUCCESS:
        raise CopylessError(f"job {handle.job_id} ended with {status.name}")
    return slot.postprocess(task, batch)
