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
  on a :class:`copyless.Pipeline`: while jobs run, the next frames are preprocessed into the
  next slot's rows; each slot's outputs are postprocessed when its job ends.

``<backend>`` is ``ort`` (RunnerType.ONNXRUNTIME) or ``ov`` (RunnerType.OPENVINO); runner
options are copyless's defaults except ``inference_precision`` when ``--ov-precision`` sets
one, and ``engine_spinning`` for the sync pipelines: they spin within each run as
copyless-zerocopy does (and as the plain pipeline's and engine-ort's onnxruntime defaults
do), unless ``--no-spin``. The async pipelines keep the default (their jobs run one engine
thread each on a machine of up to ``max_concurrent_runs`` cores).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...memory import NpuTensor
from ...pipeline import ItemTensors
from ...pipeline import Pipeline as CopylessPipeline
from ...runner import Runner, RunnerFactory
from ...types import (
    CopylessError,
    QuantParameters,
    RunnerType,
    StatusCode,
    TensorDirection,
    TensorType,
)
from ...vision import Preparer, preparer_for
from .contender import FAMILY_COPYLESS, Contender
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
         precision: str | None, spin: bool = True) -> Contender:  # fmt: skip
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
    return Contender(name, FAMILY_COPYLESS, False, run, runner.close, watch=watch, engine=backend)


def pipelined(model: Path, task: Task, photo: Photo, batch: int, backend: str, slots: int,
              precision: str | None) -> Contender:  # fmt: skip
    """``max_concurrent_runs=slots`` on a :class:`copyless.Pipeline` (its default slots: one
    more, prepared while the engine holds the others): frames are decoded and preprocessed
    straight into their rows of a slot's batch tensor, ``batch`` frames a job."""
    runner = _runner(model, backend, "HW", slots, precision)
    buffers = _JobBuffers(runner, TensorType.HW)  # the preparer, the quantization
    full = (photo.pixels.shape[0], photo.pixels.shape[1])
    placements: dict[int, Any] = {}

    def prepare(frame: int, inputs: ItemTensors) -> None:
        image = buffers.prepare.decode(photo.data) if photo.per_frame else photo.pixels
        placements[inputs.row] = buffers.prepare(image, inputs[0], 0, full)

    def finish(frame: int, outputs: ItemTensors) -> Outcome:
        return task.copyless_postprocess(outputs[0], buffers.quant, placements[outputs.row], 0)

    pipeline = CopylessPipeline(runner, prepare, finish, batch=batch)

    def run(batches: int) -> Outcome:
        outcome = Outcome()
        for result in pipeline.map(range(batches * batch)):
            if result.index % batch == 0:  # frame 0 of each batch, as the sync contenders
                outcome = result.unwrap()
        return outcome

    def close() -> None:
        pipeline.close()
        runner.close()

    name = f"copyless-{backend}-async{slots}"
    return Contender(name, FAMILY_COPYLESS, True, run, close, engine=backend)
