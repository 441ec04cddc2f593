"""What copyless-video does with each frame's outputs: classify, find text boxes, or
detect objects.

The task follows from the model's outputs: one ``[B, classes]`` (or ``[B, classes, 1, 1]``)
output is a classifier (top-1 line per frame), one ``[B, 1, h, w]`` probability map is a
DB text detector (one line per frame, then the boxes as ``copyless-detect`` prints them),
a detector (its task record names boxes/scores/classes: a folded postprocess, a YOLO head,
torchvision's decoded outputs; at batch B a ``batch_index`` output says whose rows;
``frame N: K detections``, then ``box: ...`` lines), a segmenter (``frame N: K classes``,
then ``mask: ...`` lines). The task comes from the model's record
(:func:`copyless.model.task_of`), the outputs' shapes for models without one.
The built-in models (``-m efficientnet-lite0`` (default), ``-m ppocr-det``, ``-m face``
(CenterFace), ``-m layout`` (PP-PicoDet layout)) are the zoo's, compiled for the clip's
planes, size and colours (and a batch of B frames) and cached. A task reads the frame's
output tensors in place: its own row views of a batch's outputs (``copyless.Pipeline``
hands them out), and for a data-dependent output shared by the batch's rows the rows whose
``batch_index`` is the frame's ``row``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy.typing as npt

from ...memory import NpuTensor
from ...model import TaskRecord, zoo
from ...types import NpuTensorInfo, QuantParameters
from ...vision import (
    Box,
    Letterbox,
    Placement,
    StreamInfo,
    VideoError,
    class_mask,
    detections,
    mask_summary,
    mask_to_image,
    softmax_topk,
    text_boxes,
    to_image,
)
from .._models import (
    CLASSIFIER,
    DETECTOR,
    OBJECT_DETECTORS,
    builtin_model,
    builtin_object_detector,
)
from .._output import box_fields, detection_fields

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
    mask: npt.NDArray[Any] | None = None  # a segmenter's label map, painted into the video


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
    """Objects of the outputs the task record names boxes/scores/classes (+ ``landmarks``),
    in frame pixels (``produced_shape[0]`` rows, read in place; ``placement()``: where the
    frame lies in a model compiled for images, None for one that takes the planes and
    scales its boxes to the frame itself). At batch B > 1 the outputs are the job's, shared
    by its frames: the rows whose ``batch_index`` is the frame's ``row`` (a small index
    copy)."""

    def __init__(self, names: Sequence[str], labels: list[str],
                 roles: Mapping[str, str] | None = None,
                 placement: Callable[[], Placement] | None = None) -> None:  # fmt: skip
        self.at = {name: i for i, name in enumerate(names)}
        given = dict(roles or {})
        self.roles = {role: given.get(role, role) for role in
                      ("boxes", "scores", "classes", "landmarks", "batch_index")
                      if given.get(role, role) in self.at}  # fmt: skip
        self.labels = labels
        self.placement = placement

    def __call__(self, outputs: Sequence[NpuTensor], index: int, row: int = 0) -> TaskResult:
        by_role = {role: outputs[self.at[name]] for role, name in self.roles.items()}
        shape = by_role["scores"].produced_shape
        count = shape[0] if shape else 0
        rows: dict[str, Any] = {role: by_role[role] for role in ("boxes", "scores", "classes")}
        if "landmarks" in by_role:
            rows["landmarks"] = by_role["landmarks"]
        if "batch_index" in by_role:  # batch B: this frame's rows (sorted by image)
            mine = by_role["batch_index"].numpy()[:count] == row
            rows = {name: tensor.numpy()[:count][mine] for name, tensor in rows.items()}
            count = int(mine.sum())
        found = detections(
            rows["boxes"], rows["scores"], rows["classes"], self.labels, count=count,
            landmarks=rows.get("landmarks"),
        )  # fmt: skip
        if self.placement is not None:
            found = to_image(found, self.placement())
        lines = [f"frame {index}: {len(found)} detections"]
        lines += [f"  {det.line()}" for det in found]
        boxes = tuple(det.box for det in found)
        fields = {"detections": [detection_fields(det) for det in found]}
        return TaskResult(lines, f"{index}: {len(found)} detections", boxes, fields)


class Segment:
    """The classes of the frame's mask (or class scores), mapped to the frame: one line per
    frame, then ``mask: ...`` per class, most pixels first; the banner names the largest."""

    def __init__(self, position: int, labels: list[str], size: tuple[int, int],
                 placement: Callable[[], Placement] | None) -> None:  # fmt: skip
        self.position, self.labels, self.size = position, labels, size
        self.placement = placement

    def __call__(self, outputs: Sequence[NpuTensor], index: int, row: int = 0) -> TaskResult:
        mask = class_mask(outputs[self.position])
        if self.placement is not None:
            mask = mask_to_image(mask, self.placement(), self.size)
        elif mask.base is not None:  # a view of the output: copied, as the video is
            mask = mask.copy()  # written after the output's slot is reused
        found = mask_summary(mask, self.labels)
        lines = [f"frame {index}: {len(found)} classes", *(f"  {c.line()}" for c in found)]
        top = f"{found[0].label} {found[0].fraction:.0%}" if found else "nothing"
        fields = {"classes": [{"class_id": c.class_id, "label": c.label, "pixels": c.pixels,
                               "fraction": round(c.fraction, 4)} for c in found]}  # fmt: skip
        return TaskResult(lines, f"{index}: {top}", (), fields, mask)


def task_for(
    outs: Sequence[NpuTensorInfo],
    quant: QuantParameters | None,
    info: StreamInfo,
    labels: Sequence[str] = (),
    record: TaskRecord | None = None,
    placement: Callable[[], Placement] | None = None,
) -> VideoTask:
    """The task the model's record (else its outputs) calls for (``labels``: the class
    names, :func:`copyless.model.class_names`'s; ``placement``: where a frame lies in a
    model compiled for images); VideoError for any other outputs."""
    names = [o.name for o in outs]
    roles = dict(record.roles) if record is not None else {}
    detector = (record is not None and record.task == "detect") or \
        set(names) >= _DETECTION_OUTPUTS  # fmt: skip
    if detector and {"boxes", "scores", "classes"} <= (set(roles) or set(names)):
        return Detect(names, list(labels), roles, placement)
    if record is not None and record.task == "segment":
        name = roles.get("mask") or roles.get("class_scores")
        if name in names:
            return Segment(names.index(name), list(labels), (info.height, info.width), placement)
    if len(outs) != 1:
        raise VideoError(f"copyless-video needs a model whose task record names its outputs "
                         f"(classify, detect, segment); this one has {len(outs)} outputs: "
                         f"{[o.describe() for o in outs]}")  # fmt: skip
    out = outs[0]
    shape = out.shape
    if shape and (len(shape) == 2 or (len(shape) == 4 and shape[2:] == (1, 1))):
        return Classify(quant, labels)
    if len(shape) == 4 and shape[1] == 1:
        return TextBoxes(out, info.width, info.height)
    raise VideoError(
        "copyless-video needs [B, classes] logits, a [B, 1, h, w] text probability map, a "
        f"detector or a segmenter (compile it with --task); this model has {out.describe()}"
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
    entry = zoo.entry(name)
    prep = entry.preprocessing
    if entry.fixed_side is not None:  # a multiple of the model's: the frame's aspect kept,
        m = prep.size_multiple  # the long side at most the side the apps compile it at
        scale = min(1.0, entry.fixed_side / max(info.height, info.width))
        h, w = (max(m, round(side * scale / m) * m) for side in (info.height, info.width))
        options["input_shapes"] = {"x": (batch, 3, h, w)}
    elif prep.resize:
        options["input_crop"] = prep.size[0] / prep.resize
    return builtin_model(name, **options)
