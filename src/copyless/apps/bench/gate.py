"""The correctness gate: every pipeline must agree with the plain pipeline on the photo.

Classifiers: the same top-1 class; at FP32 also at least 4 of the same top-5 classes
(INT8 may reorder the tail). Detector: the box count within one of the plain pipeline's,
and every plain box but one matched by a box with IoU >= 0.5. A pipeline that disagrees
is reported as WRONG and not timed.
"""

from __future__ import annotations

from .tasks import BoxTuple, Outcome

MIN_TOP5_SHARED = 4
MIN_IOU = 0.5


def disagreement(reference: Outcome, got: Outcome, precision: str) -> str | None:
    """Why ``got`` disagrees with the plain pipeline's ``reference``; None when it agrees."""
    if reference.classes:
        if not got.classes or got.classes[0] != reference.classes[0]:
            first = got.classes[0] if got.classes else None
            return f"top-1 {first} != plain's {reference.classes[0]}"
        shared = len(set(got.classes) & set(reference.classes))
        if precision == "fp32" and shared < MIN_TOP5_SHARED:
            return f"top-5 shares {shared} classes with plain's"
        return None
    if abs(len(got.boxes) - len(reference.boxes)) > 1:
        return f"{len(got.boxes)} boxes vs plain's {len(reference.boxes)}"
    matched = sum(
        1 for box in reference.boxes if max((iou(box, b) for b in got.boxes), default=0.0) >= MIN_IOU
    )
    if matched < len(reference.boxes) - 1:
        return f"{matched} of plain's {len(reference.boxes)} boxes matched (IoU >= {MIN_IOU})"
    return None


def iou(a: BoxTuple, b: BoxTuple) -> float:
    """Intersection over union of two (x0, y0, x1, y1) boxes."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
