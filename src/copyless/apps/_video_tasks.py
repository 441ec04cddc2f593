"""What copyless-video does with each frame's outputs: classify, find text boxes, or
detect objects.

The task follows from the model's outputs: one ``[B, classes]`` (or ``[B, classes, 1, 1]``)
output is a classifier (top-1 line per frame), one ``[B, 1, h, w]`` probability map is a
DB text detector (one line per frame, then the boxes as ``copyless-detect`` prints them),
``boxes``/``scores``/``classes`` outputs (a folded postprocess: decoding and NMS in the
graph; at batch B a ``batch_index`` output says whose rows) an object detector
(``frame N: K detections``, then ``box: ...`` lines).
The built-in models (``-m efficientnet-lite0`` (default), ``-m ppocr-det``, ``-m face``
(CenterFace), ``-m layout`` (PP-PicoDet layout)) are the zoo's, compiled for the clip's
planes, size and colours (and a batch of B frames) and cached. A task reads the frame's
output tensors in place: its own row views of a batch's outputs (``copyless.Pipeline``
hands them out), and for a data-dependent output shared by the batch's rows the rows whose
``batch_index`` is the frame's ``row``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..memory import NpuTensor
from ..model import zoo
from ..types import NpuTensorInfo, QuantParameters
from ..vision import (
    Box,
    Letterbox,
    StreamInfo,
    VideoError,
    detections,
    softmax_topk,
    text_boxes,
)
from ._models import (
    CLASSIFIER,
    DETECTOR,
    DETECTOR_SIZE,
    OBJECT_DETECTORS,
    builtin_model,
    builtin_object_detector,
)
from ._output import box_fields, detection_fields

#: The zoo models ``-m`` may name instead of a compiled model path.
BUILTIN = (CLASSIFIER, DETECTOR, *OBJECT_DETECTORS)
_DETECTION_OUTPUTS = {"boxes", "scores", "classes"}


@dataclass(frozen=True, slots=True)
class TaskResult:
    """One frame's result: printed ``lines``, the output video's ``banner`` and ``boxes``,
    and the ``fields`` of its JSON line (``--json``)."""

    lines: list[str]
    banner: str
    boxes: tuple[Box, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)


class VideoTask(Protocol):
    def __call__(self, outputs: Sequence[NpuTensor], index: int, row: int = 0) -> TaskResult:
        """The result of frame ``index`` from its ``outputs`` (valid during the call only);
        ``row``: the frame's row in its job (the ``batch_index`` of a shared output)."""


class Classify:
    """Top-1 label of the frame's ``[1, classes]`` logits (its row of the batch's)."""

    def __init__(self, quant: QuantParameters | None, labels: Sequence[str]) -> None:
        self.quant = quant
        self.labels = list(labels)

    def __call__(self, outputs: Sequence[NpuTensor], index: int, row: int = 0) -> TaskResult:
        ((class_id, score),) = softmax_topk(outputs[0], 1, self.quant)
        label = self.labels[class_id] if class_id < len(self.labels) else f"class {class_id}"
        return TaskResult([f"frame {index}: {class_id} {label} {score:.3f}"],
                          f"{index}: {label} {score:.2f}",
                          fields={"class_id": class_id, "label": label,
                                  "score": round(score, 4)})  # fmt: skip


class TextBoxes:
    """Text boxes of the frame's ``[1, 1, h, w]`` probability map (its row of the batch's)
    over the whole (stretched) frame."""

    def __init__(self, out: NpuTensorInfo, width: int, height: int) -> None:
        self.size = max(out.shape[2:]) * 4  # canvas: the map scaled as text_boxes does
        self.width, self.height = width, height

    def __call__(self, outputs: Sequence[NpuTensor], index: int, row: int = 0) -> TaskResult:
        canvas = Letterbox(1.0, 0, 0, self.size, self.size, self.size)
        sx, sy = self.width / self.size, self.height / self.size
        boxes = tuple(
            Box(b.x0 * sx, b.y0 * sy, b.x1 * sx, b.y1 * sy, b.score)
            for b in text_boxes(outputs[0], canvas)
        )
        lines = [f"frame {index}: {len(boxes)} text boxes"]
        lines += [f"  box ({b.x0:.0f}, {b.y0:.0f}) - ({b.x1:.0f}, {b.y1:.0f}) {b.score:.2f}"
                  for b in boxes]  # fmt: skip
        fields = {"boxes": [box_fields(b) for b in boxes]}
        return TaskResult(lines, f"{index}: {len(boxes)} text boxes", boxes, fields)


class Detect:
    """Objects of a folded postprocess's ``boxes``/``scores``/``classes`` (+ ``landmarks``)
    outputs, in frame pixels (``produced_shape[0]`` rows, read in place; at batch B > 1 the
    outputs are the job's, shared by its frames: the rows whose ``batch_index`` is the
    frame's ``row``, a small index copy)."""

    def __init__(self, names: Sequence[str], labels: list[str]) -> None:
        self.at = {name: i for i, name in enumerate(names)}
        self.labels = labels

    def __call__(self, outputs: Sequence[NpuTensor], index: int, row: int = 0) -> TaskResult:
        by_name = {name: outputs[i] for name, i in self.at.items()}
        shape = by_name["scores"].produced_shape
        count = shape[0] if shape else 0
        rows: dict[str, Any] = {name: by_name[name] for name in ("boxes", "scores", "classes")}
        if "landmarks" in by_name:
            rows["landmarks"] = by_name["landmarks"]
        if "batch_index" in by_name:  # batch B: this frame's rows (sorted by image)
            mine = by_name["batch_index"].numpy()[:count] == row
            rows = {name: tensor.numpy()[:count][mine] for name, tensor in rows.items()}
            count = int(mine.sum())
        found = detections(
            rows["boxes"], rows["scores"], rows["classes"], self.labels, count=count,
            landmarks=rows.get("landmarks"),
        )  # fmt: skip
        lines = [f"frame {index}: {len(found)} detections"]
        lines += [f"  {det.line()}" for det in found]
        boxes = tuple(det.box for det in found)
        fields = {"detections": [detection_fields(det) for det in found]}
        return TaskResult(lines, f"{index}: {len(found)} detections", boxes, fields)


def task_for(
    outs: Sequence[NpuTensorInfo],
    quant: QuantParameters | None,
    info: StreamInfo,
    labels: Sequence[str] = (),
) -> VideoTask:
    """The task the model's outputs call for (``labels``: the class names,
    :func:`copyless.model.class_names`'s); VideoError for any other outputs."""
    names = [o.name for o in outs]
    if set(names) >= _DETECTION_OUTPUTS:
        return Detect(names, list(labels))
    if len(outs) != 1:
        raise VideoError(f"copyless-video needs a model with one output, not {len(outs)}")
    out = outs[0]
    shape = out.shape
    if shape and (len(shape) == 2 or (len(shape) == 4 and shape[2:] == (1, 1))):
        return Classify(quant, labels)
    if len(shape) == 4 and shape[1] == 1:
        return TextBoxes(out, info.width, info.height)
    raise VideoError(
        "copyless-video needs one output: [B, classes] logits or a [B, 1, h, w] text "
        f"probability map; this model has {out.describe()}"
    )


def compact_line_sizes(info: StreamInfo) -> tuple[int, int]:
    """Bytes per luma and chroma line of unpadded planes of this stream."""
    chroma = (info.width + 1) // 2
    return info.width, 2 * chroma if info.input_format == "nv12" else chroma


def builtin_for(
    name: str, info: StreamInfo, line_sizes: tuple[int, int] | None = None, batch: int = 1
) -> Path:
    """Zoo model ``name`` compiled for this stream's planes, size and colours and ``batch``
    frames per run (cached); with the decoder's ``line_sizes`` when its lines are padded
    (planes bound as they are)."""
    options: dict[str, Any] = {
        "input_format": info.input_format,
        "input_size": (info.height, info.width),
        "yuv_matrix": info.yuv_matrix,
        "yuv_range": info.yuv_range,
    }
    if line_sizes is not None and line_sizes != compact_line_sizes(info):
        options["input_line_sizes"] = line_sizes
    if batch != 1:
        options["batch_size"] = batch
    if name in OBJECT_DETECTORS:  # decoding and NMS folded in, batched (batch_index rows)
        return builtin_object_detector(OBJECT_DETECTORS[name], (info.height, info.width),
                                       **options)  # fmt: skip
    prep = zoo.preprocessing(name)
    if name == DETECTOR:  # any multiple of 32: keep the frame's aspect, long side <= 640
        scale = min(1.0, DETECTOR_SIZE / max(info.height, info.width))
        h, w = (max(32, round(side * scale / 32) * 32) for side in (info.height, info.width))
        options["input_shapes"] = {"x": (batch, 3, h, w)}
    elif prep.resize:
        options["input_crop"] = prep.size[0] / prep.resize
    return builtin_model(name, **options)
