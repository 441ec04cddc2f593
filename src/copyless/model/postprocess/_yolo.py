"""A raw YOLOv8 / YOLO11 head decoded in the graph, as ultralytics' ``non_max_suppression``
does it for ``YOLO(...).predict``.

The head (ultralytics' ONNX export, ``output0``) is ``[B, 4 + C, A]``: per anchor the box
centre, width and height in model-input pixels (already decoded from the distribution
head by the export) then the C class probabilities (already sigmoid). For every anchor::

    box   = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
    score = its best class's probability; the other classes' scores are zero

so that, as ultralytics' single-label NMS, an anchor competes only for its best class.
NMS per class (ultralytics offsets boxes by class for one ``torchvision.ops.nms``: the
same), IoU 0.7 and score > 0.25 by default (``predict``'s ``iou`` and ``conf``), at most
``max_detections`` (its ``max_det``, 300) kept, highest first; boxes are clipped to the
model input after NMS (ultralytics clips after scaling to the photo: the same boxes
inside the letterbox's picture).
"""

from __future__ import annotations

import numpy as np

from ...types import UnsupportedError
from .._task import yolo_anchors
from ._nms import Candidates
from ._ops import Ops

__all__ = ["decode"]

#: xywh -> xyxy as one MatMul: each column of the matrix makes one corner.
_CORNERS = np.array(
    [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [-0.5, 0.0, 0.5, 0.0], [0.0, -0.5, 0.0, 0.5]],
    np.float32,
)


def decode(
    ops: Ops, heads: list[tuple[str, tuple[int, ...]]], size: tuple[int, int], batch: int = 1
) -> Candidates:
    """Candidates from the one head ``[(tensor, [B, 4 + C, A])]`` of a model whose input is
    ``batch`` images of ``size``."""
    anchors = yolo_anchors(*size)
    shapes = [shape for _, shape in heads]
    if len(heads) != 1 or len(shapes[0]) != 3 or shapes[0][0] != batch \
            or shapes[0][1] <= 4 or shapes[0][2] != anchors:  # fmt: skip
        raise UnsupportedError(
            f"postprocess 'yolo' needs one output [{batch}, 4 + C, {anchors}] (a YOLOv8/YOLO11 "
            f"head for a {size[0]}x{size[1]} input: strides 8, 16, 32); the model gives {shapes}"
        )
    head, (_, channels, _) = heads[0]
    classes = channels - 4
    xywh = ops.op("Slice", head, ops.i64(0, tag="start"), ops.i64(4, tag="end"),
                  ops.i64(1, tag="axis"))  # fmt: skip
    corners = ops.op("MatMul", ops.op("Transpose", xywh, perm=[0, 2, 1]),
                     ops.const(_CORNERS, tag="corners"))  # [B, A, 4]  # fmt: skip
    scores = ops.op("Slice", head, ops.i64(4, tag="start"), ops.i64(channels, tag="end"),
                    ops.i64(1, tag="axis"))  # [B, C, A]  # fmt: skip
    best = ops.op("ReduceMax", scores, axes=[1], keepdims=1) if ops.opset < 18 else ops.op(
        "ReduceMax", scores, ops.i64(1, tag="axes"), keepdims=1)  # fmt: skip
    single = ops.op("Where", ops.op("GreaterOrEqual", scores, best), scores, ops.const(0.0))
    return Candidates(boxes=corners, scores=single, count=anchors, classes=classes, batch=batch)
