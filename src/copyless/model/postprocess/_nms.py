"""What every detector postprocess ends with: ONNX ``NonMaxSuppression`` over the decoded
candidates, the survivors sorted by score and cut to ``max_detections``, boxes clipped to the
model input and scaled to the frame.

A decoder hands over :class:`Candidates` in model-input pixels; :func:`select` appends the
nodes that turn them into the final outputs (``boxes [K, 4]`` float32 ``x0, y0, x1, y1``,
``scores [K]`` float32, ``classes [K]`` int64, plus any per-candidate ``extra`` rows such as
landmarks), ``K <= max_detections`` depending on the image.

Batch B > 1: ``NonMaxSuppression`` runs over the B images at once (its batch dim); the rows
of every image come in one set of outputs, sorted by image, then by score, with one more
output ``batch_index [K]`` int64 (the image of each row). Each image keeps at most
``max_detections`` boxes per class (NMS's own cap); the outputs hold at most
``B * max_detections`` rows in all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ._ops import Ops

__all__ = ["Candidates", "Extra", "Selection", "select"]


@dataclass(frozen=True, slots=True)
class Extra:
    """Per-candidate points carried to output ``name``: ``rows`` is ``[N, 2 * points]``
    float32 ``x, y, x, y ...`` in model-input pixels (scaled to the frame, not clipped)."""

    name: str
    rows: str
    points: int


@dataclass(frozen=True, slots=True)
class Candidates:
    """Decoded candidates of ``batch`` images.

    ``boxes``: ``[B, N, 4]`` float32 ``x0, y0, x1, y1`` in model-input pixels. ``scores``:
    ``[B, C, N]`` float32 per class, probabilities in 0..1. ``count``: N; ``classes``: C.
    ``extra``: more per-candidate outputs (rows ``[B * N, 2 * points]``, image-major).
    ``per_class``: the most boxes NMS keeps per class (None: ``max_detections``).
    """

    boxes: str
    scores: str
    count: int
    classes: int
    extra: tuple[Extra, ...] = ()
    per_class: int | None = None
    batch: int = 1


@dataclass(frozen=True, slots=True)
class Selection:
    """Thresholds and geometry of one selection."""

    score_threshold: float
    iou_threshold: float
    max_detections: int
    model_size: tuple[int, int]  # (H, W) of the model input the boxes are in
    frame_size: tuple[int, int]  # (H, W) of the frame the outputs are scaled to


def select(ops: Ops, cand: Candidates, sel: Selection) -> dict[str, str]:
    """Append NMS, sorting and scaling; returns ``{output name: tensor}`` in output order."""
    per_class = min(sel.max_detections, cand.per_class or sel.max_detections)
    chosen = ops.op(
        "NonMaxSuppression",
        cand.boxes,
        cand.scores,
        ops.i64(per_class, tag="max_per_class"),
        ops.const([sel.iou_threshold], tag="iou_threshold"),
        ops.const([sel.score_threshold], tag="score_threshold"),
    )  # [M, 3]: batch, class, box index; per class in descending score
    scores = ops.op("GatherND", cand.scores, chosen)  # [M]
    limit = sel.max_detections * cand.batch
    k = ops.op("Min", ops.op("Shape", scores), ops.i64(limit, tag="max_detections"))
    image = None
    if cand.batch == 1:
        top, order = ops.multi("TopK", [scores, k], 2, axis=0, largest=1, sorted=1)
    else:  # by image, then by score: scores are in 0..1, so score - 2 * image sorts both
        image = ops.op("Gather", chosen, ops.const(0, np.int64, "batch_column"), axis=1)
        offset = ops.op("Mul", ops.op("Cast", image, to=onnx.TensorProto.FLOAT), ops.const(2.0))
        _, order = ops.multi("TopK", [ops.op("Sub", scores, offset), k], 2, axis=0, largest=1,
                             sorted=1)  # fmt: skip
        top = ops.op("Gather", scores, order, axis=0)
        image = ops.op("Gather", image, order, axis=0)
    column = ops.const(1, np.int64, "class_column")
    classes = ops.op("Gather", ops.op("Gather", chosen, column, axis=1), order, axis=0)
    index = ops.op("Gather", ops.op("Gather", chosen, ops.const(2, np.int64, "box_column"),
                                    axis=1), order, axis=0)  # fmt: skip
    if image is not None:  # the row in the image-major flat candidates
        index = ops.op("Add", ops.op("Mul", image, ops.const(cand.count, np.int64, "count")),
                       index)  # fmt: skip
    flat = ops.op("Reshape", cand.boxes, ops.i64(cand.batch * cand.count, 4, tag="flat_boxes"))
    boxes = ops.op("Gather", flat, index, axis=0)
    (mh, mw), (fh, fw) = sel.model_size, sel.frame_size
    boxes = ops.op("Max", ops.op("Min", boxes, ops.const([mw, mh, mw, mh], tag="size")),
                   ops.const([0.0], tag="zero"))  # fmt: skip
    scale_xy = [fw / mw, fh / mh]
    outputs = {
        "boxes": _scaled(ops, boxes, scale_xy * 2),
        "scores": top,
        "classes": classes,
    }
    for extra in cand.extra:
        points = ops.op("Gather", extra.rows, index, axis=0)
        outputs[extra.name] = _scaled(ops, points, scale_xy * extra.points)
    if image is not None:
        outputs["batch_index"] = image
    return outputs


def _scaled(ops: Ops, tensor: str, factors: list[float]) -> str:
    if all(f == 1.0 for f in factors):
        return tensor
    return ops.op("Mul", tensor, ops.const(factors, tag="frame_scale"))
