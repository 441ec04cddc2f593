"""A detector and a classifier of its crops served as one model, for
:class:`~._chain.ServedChain`: one encoded photo in, its objects out, each with the class
the classifier gives its crop (a shelf's products, a street's vehicles, a crowd's faces).

Both parts are compiled models (``copyless-compile``: the detector with ``--task detect``,
its boxes, scores and class ids in its task record; the classifier with its preprocessing
recorded), in the entry's folder::

    shop/
      config.pbtxt        backend: "copyless-crops"
      detector/model.rai
      classifier/model.rai

    parameters { key: "detector" value { string_value: "detector" } }      # its folder
    parameters { key: "classifier" value { string_value: "classifier" } }
    parameters { key: "min_score" value { string_value: "0.3" } }   # detections kept
    parameters { key: "max_crops" value { string_value: "32" } }    # the best ones
    parameters { key: "runner" value { string_value: "onnxruntime" } }  # or openvino

Each photo is decoded once at full size; the detector's input is prepared from it as the
detector records (:class:`copyless.vision.Preparer`), its boxes mapped back to the photo's
pixels; each kept box's pixels (a view; copied only where the classifier's resize needs a
contiguous picture) are prepared into a row of the classifier's batch, the batch run when
full. Outputs, one row a detection, highest score first: ``boxes`` ``FP32 [K, 4]`` (x0, y0,
x1, y1, photo pixels), ``scores`` ``FP32 [K]``, ``classes`` ``INT32 [K]`` (the detector's),
``labels`` ``BYTES [K]`` (the classifier's top-1 name), ``label_ids`` ``INT32 [K]``,
``label_scores`` ``FP32 [K]`` (its softmax probability).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..model import class_names, task_of
from ..pipeline import Result
from ..runner import Runner, RunnerFactory
from ..types import RunnerType, StatusCode, TensorDirection, TensorType
from ..vision import (
    Detection,
    Preparer,
    ReadLimit,
    decode,
    detections,
    preparer_for,
    softmax_topk,
    to_image,
)
from ._chain_work import ChainAnswer
from ._images import BYTES
from ._tensors import ServedTensor

__all__ = ["CROPS_BACKEND", "open_crops"]

CROPS_BACKEND = "copyless-crops"
_PARAMETERS = ("detector", "classifier", "min_score", "max_crops", "runner")
_OUTPUTS = (
    ServedTensor("boxes", "FP32", np.dtype(np.float32), (-1, 4), (0, 4), False, True),
    ServedTensor("scores", "FP32", np.dtype(np.float32), (-1,), (0,), False, True),
    ServedTensor("classes", "INT32", np.dtype(np.int32), (-1,), (0,), False, True),
    ServedTensor("labels", BYTES, np.dtype(object), (-1,), (0,), False, True),
    ServedTensor("label_ids", "INT32", np.dtype(np.int32), (-1,), (0,), False, True),
    ServedTensor("label_scores", "FP32", np.dtype(np.float32), (-1,), (0,), False, True),
)


@dataclass(frozen=True, slots=True)
class CropClass:
    """One detection and the class its crop was given."""

    detection: Detection
    label_id: int
    label: str
    label_score: float


@dataclass(frozen=True, slots=True)
class PhotoObjects:
    """A photo's objects, highest detection score first, and its stages' seconds."""

    objects: tuple[CropClass, ...]
    stages: Mapping[str, float]


class _Model:
    """A compiled model open for one caller: its runner, input, outputs and preparer."""

    def __init__(self, folder: Path, runner_type: RunnerType, role: str) -> None:
        self.runner: Runner = RunnerFactory.create_runner(folder, None, runner_type)
        try:
            view = TensorType.HW
            (info,) = self.runner.get_tensors_info(TensorDirection.INPUT, view)
            self.input = self.runner.allocate_npu_tensor(info)
            outs = self.runner.get_tensors_info(TensorDirection.OUTPUT, view)
            self.outputs = {o.name: self.runner.allocate_npu_tensor(o) for o in outs}
            self.prepare: Preparer = preparer_for(self.runner, info)
            if self.prepare.assumed:
                lacks = ", ".join(self.prepare.assumed)
                raise ValueError(f"the {role} ({folder}) records no {lacks}: compile it "
                                 "with its preprocessing recorded")  # fmt: skip
            self.batch = self.runner.get_batch_size()
        except BaseException:
            self.runner.close()
            raise
        self.role = role

    def run(self) -> None:
        status = self.runner.execute([[self.input]], [list(self.outputs.values())])
        if status is not StatusCode.SUCCESS:
            raise RuntimeError(f"the {self.role} failed: {status.name}")

    def close(self) -> None:
        self.runner.close()


class _CropsWork:
    """The detector and the classifier, reading the served photos one after the other."""

    outputs = _OUTPUTS

    def __init__(self, detector: _Model, classifier: _Model, limit: ReadLimit,
                 min_score: float, max_crops: int) -> None:  # fmt: skip
        roles = dict(task_of(detector.runner.model).roles)
        missing = [r for r in ("boxes", "scores", "classes") if r not in roles]
        if missing:
            raise ValueError(f"the detector's task record names no {missing} outputs: "
                             "compile it with --task detect")  # fmt: skip
        (logits,) = classifier.outputs
        self._roles = roles
        self._detector, self._classifier = detector, classifier
        self._det_names = class_names(detector.runner.model)
        self._names = class_names(classifier.runner.model)
        self._quant = classifier.runner.get_quant_parameters(logits)
        self._limit, self._min_score, self._max_crops = limit, min_score, max_crops

    def warm(self) -> None:
        rng = np.random.default_rng(0)
        photo = rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
        self.read(photo)
        self._classify([photo[:64, :64]])  # the classifier too, even with nothing found

    def map(self, pages: Iterator[bytes | memoryview]) -> Iterator[Result]:
        for index, data in enumerate(pages):
            try:
                found = self.read(data)
            except ValueError as exc:
                yield Result(data, error=exc, index=index)
                continue
            yield Result(data, value=found, index=index, timings=found.stages)

    def read(self, source: bytes | memoryview | npt.NDArray[np.uint8]) -> PhotoObjects:
        """The photo's objects (``source``: an encoded photo or RGB pixels). Raises
        ``ValueError`` for what is no photo."""
        start = time.perf_counter()
        photo = decode(source, limit=self._limit)
        detector = self._detector
        placed = detector.prepare(photo, detector.input)
        prepared = time.perf_counter()
        detector.run()
        found = self._found(detector.prepare.to_photo(placed, photo.shape[:2]))
        detected = time.perf_counter()
        crops = [photo[y0:y1, x0:x1] for x0, y0, x1, y1 in (_pixels(d, photo) for d in found)]
        classes = self._classify(crops)
        done = time.perf_counter()
        objects = tuple(CropClass(det, cid, self._name(cid), score)
                        for det, (cid, score) in zip(found, classes, strict=True))  # fmt: skip
        return PhotoObjects(objects, {"prepare": prepared - start, "infer": detected - prepared,
                                      "finish": done - detected})  # fmt: skip

    def _found(self, placement: Any) -> list[Detection]:
        outputs, roles = self._detector.outputs, self._roles
        scores = outputs[roles["scores"]]
        shape = scores.produced_shape
        count = shape[0] if shape else scores.info.shape[0]
        found = detections(outputs[roles["boxes"]], scores, outputs[roles["classes"]],
                           self._det_names, count=count)  # fmt: skip
        kept = [d for d in to_image(found, placement) if d.box.score >= self._min_score]
        return kept[: self._max_crops]

    def _classify(self, crops: list[npt.NDArray[np.uint8]]) -> list[tuple[int, float]]:
        """Each crop's top-1 class and probability, the classifier's batch filled in turn."""
        model = self._classifier
        (logits,) = model.outputs.values()
        answers: list[tuple[int, float]] = []
        for first in range(0, len(crops), model.batch):
            part = crops[first : first + model.batch]
            for row, crop in enumerate(part):
                model.prepare(np.ascontiguousarray(crop), model.input, batch_index=row)
            model.run()
            answers += [softmax_topk(logits, 1, self._quant, batch_index=row)[0]
                        for row in range(len(part))]  # fmt: skip
        return answers

    def _name(self, class_id: int) -> str:
        return self._names[class_id] if 0 <= class_id < len(self._names) else str(class_id)

    def answer(self, value: Any) -> ChainAnswer:
        found: PhotoObjects = value
        objects = found.objects
        boxes = [(o.detection.box.x0, o.detection.box.y0, o.detection.box.x1,
                  o.detection.box.y1) for o in objects]  # fmt: skip
        return ChainAnswer(
            {"boxes": np.array(boxes, np.float32).reshape(-1, 4),
             "scores": np.array([o.detection.box.score for o in objects], np.float32),
             "classes": np.array([o.detection.class_id for o in objects], np.int32),
             "labels": np.array([o.label.encode() for o in objects], dtype=object),
             "label_ids": np.array([o.label_id for o in objects], np.int32),
             "label_scores": np.array([o.label_score for o in objects], np.float32)},
            found.stages,
        )  # fmt: skip

    def close(self) -> None:
        self._detector.close()
        self._classifier.close()


def _pixels(det: Detection, photo: npt.NDArray[np.uint8]) -> tuple[int, int, int, int]:
    """The whole pixels a box covers, clipped to the photo, at least one pixel wide/high."""
    height, width = photo.shape[:2]
    x0 = min(max(math.floor(det.box.x0), 0), width - 1)
    y0 = min(max(math.floor(det.box.y0), 0), height - 1)
    x1 = min(max(math.ceil(det.box.x1), x0 + 1), width)
    y1 = min(max(math.ceil(det.box.y1), y0 + 1), height)
    return x0, y0, x1, y1


def open_crops(folder: Path, parameters: Mapping[str, str], limit: ReadLimit) -> _CropsWork:
    """The chain in ``folder`` with its config's parameters; raises ``ValueError`` in one
    line for a wrong parameter or a missing part."""
    unknown = sorted(set(parameters) - set(_PARAMETERS))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown}: the crops chain takes "
                         f"{', '.join(_PARAMETERS)}")  # fmt: skip
    try:
        min_score = float(parameters.get("min_score", "0"))
        max_crops = int(parameters.get("max_crops", "100"))
    except ValueError as exc:
        raise ValueError(f"parameter min_score or max_crops: {exc}") from None
    if not 0 <= min_score <= 1 or max_crops < 1:
        raise ValueError(f"min_score must be in 0..1 and max_crops >= 1, got {min_score}, "
                         f"{max_crops}")  # fmt: skip
    runner = parameters.get("runner", "onnxruntime").upper()
    if runner not in RunnerType.__members__:
        raise ValueError(f"parameter runner: unknown engine {runner.lower()!r}")
    parts = {}
    for role in ("detector", "classifier"):
        path = folder / parameters.get(role, role)
        if not path.exists():
            raise ValueError(f"the {role} is missing: no {path} (a compiled model's folder "
                             f"or .rai; parameter {role!r} names it)")  # fmt: skip
        parts[role] = path
    detector = _Model(parts["detector"], RunnerType[runner], "detector")
    try:
        classifier = _Model(parts["classifier"], RunnerType[runner], "classifier")
    except BaseException:
        detector.close()
        raise
    try:
        return _CropsWork(detector, classifier, limit, min_score, max_crops)
    except BaseException:
        detector.close()
        classifier.close()
        raise
