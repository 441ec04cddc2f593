"""What copyless-video does with each frame's output: classify, or find text boxes.

The task follows from the model's output: one ``[1, classes]`` (or ``[1, classes, 1, 1]``)
output is a classifier (top-1 line per frame), one ``[1, 1, h, w]`` probability map is a
DB text detector (one line per frame, then the boxes as ``copyless-detect`` prints them).
The built-in models (``-m efficientnet-lite0`` (default) or ``-m ppocr-det``) are the zoo's,
compiled for the clip's planes, size and colours and cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..memory import NpuTensor
from ..model import zoo
from ..types import CopylessError, NpuTensorInfo, QuantParameters
from ..vision import Box, Letterbox, StreamInfo, VideoError, softmax_topk, text_boxes
from ._models import CLASSIFIER, DETECTOR, DETECTOR_SIZE, builtin_model

#: The zoo models ``-m`` may name instead of a compiled model path.
BUILTIN = (CLASSIFIER, DETECTOR)


@dataclass(frozen=True, slots=True)
class Result:
    """One frame's result: printed ``lines``, the output video's ``banner`` and ``boxes``."""

    lines: list[str]
    banner: str
    boxes: tuple[Box, ...] = ()


class Task(Protocol):
    def __call__(self, output: NpuTensor, index: int) -> Result: ...


class Classify:
    """Top-1 label of ``[1, classes]`` logits."""

    def __init__(self, quant: QuantParameters | None) -> None:
        self.quant = quant
        try:
            self.labels = zoo.labels()
        except CopylessError:
            self.labels = []

    def __call__(self, output: NpuTensor, index: int) -> Result:
        ((class_id, score),) = softmax_topk(output, 1, self.quant)
        label = self.labels[class_id] if class_id < len(self.labels) else f"class {class_id}"
        return Result([f"frame {index}: {class_id} {label} {score:.3f}"],
                      f"{index}: {label} {score:.2f}")  # fmt: skip


class TextBoxes:
    """Text boxes of a ``[1, 1, h, w]`` probability map over the whole (stretched) frame."""

    def __init__(self, out: NpuTensorInfo, width: int, height: int) -> None:
        self.size = max(out.shape[2:]) * 4  # canvas: the map scaled as text_boxes does
        self.width, self.height = width, height

    def __call__(self, output: NpuTensor, index: int) -> Result:
        canvas = Letterbox(1.0, 0, 0, self.size, self.size, self.size)
        sx, sy = self.width / self.size, self.height / self.size
        boxes = tuple(
            Box(b.x0 * sx, b.y0 * sy, b.x1 * sx, b.y1 * sy, b.score)
            for b in text_boxes(output, canvas)
        )
        lines = [f"frame {index}: {len(boxes)} text boxes"]
        lines += [f"  box ({b.x0:.0f}, {b.y0:.0f}) - ({b.x1:.0f}, {b.y1:.0f}) {b.score:.2f}"
                  for b in boxes]  # fmt: skip
        return Result(lines, f"{index}: {len(boxes)} text boxes", boxes)


def task_for(out: NpuTensorInfo, quant: QuantParameters | None, info: StreamInfo) -> Task:
    """The task the model's one output calls for; VideoError for any other output."""
    shape = out.shape
    if shape and shape[0] == 1 and (len(shape) == 2 or (len(shape) == 4 and shape[2:] == (1, 1))):
        return Classify(quant)
    if len(shape) == 4 and shape[:2] == (1, 1):
        return TextBoxes(out, info.width, info.height)
    raise VideoError(
        "copyless-video needs one output: [1, classes] logits or a [1, 1, h, w] text "
        f"probability map; this model has {out.describe()}"
    )


def compact_line_sizes(info: StreamInfo) -> tuple[int, int]:
    """Bytes per luma and chroma line of unpadded planes of this stream."""
    chroma = (info.width + 1) // 2
    return info.width, 2 * chroma if info.input_format == "nv12" else chroma


def builtin_for(name: str, info: StreamInfo, line_sizes: tuple[int, int] | None = None) -> Path:
    """Zoo model ``name`` compiled for this stream's planes, size and colours (cached);
    with the decoder's ``line_sizes`` when its lines are padded (planes bound as they are)."""
    prep = zoo.preprocessing(name)
    options: dict[str, Any] = {
        "input_format": info.input_format,
        "input_size": (info.height, info.width),
        "yuv_matrix": info.yuv_matrix,
        "yuv_range": info.yuv_range,
    }
    if line_sizes is not None and line_sizes != compact_line_sizes(info):
        options["input_line_sizes"] = line_sizes
    if name == DETECTOR:  # any multiple of 32: keep the frame's aspect, long side <= 640
        scale = min(1.0, DETECTOR_SIZE / max(info.height, info.width))
        h, w = (max(32, round(side * scale / 32) * 32) for side in (info.height, info.width))
        options["input_shapes"] = {"x": (1, 3, h, w)}
    elif prep.resize:
        options["input_crop"] = prep.size[0] / prep.resize
    return builtin_model(name, **options)
