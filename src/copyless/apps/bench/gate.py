"""The correctness gate: every pipeline must agree with the plain pipeline on the photo.

Classifiers: the same top-1 class; at FP32 also at least 4 of the same top-5 classes
(INT8 may reorder the tail). Detector: every plain box but one is found again (a box with
IoU >= 0.5), and the box count is within ``max(1, 50%)`` of plain's. The
postprocesses differ (rapidocr's DB dilates the map and filters after unclipping; copyless
keeps every connected component whose score passes), so a strict +-1 count would flag
two correct pipelines; the note of each detector row gives both counts and the IoU of the
areas the two box sets cover. A pipeline that disagrees is WRONG and is not timed.
"""

from __future__ import annotations

import math

import numpy as np

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
    best = [max((iou(box, b) for b in got.boxes), default=0.0) for box in reference.boxes]
    matched = sum(1 for value in best if value >= MIN_IOU)
    slack = max(1, len(reference.boxes) // 2)
    if abs(len(got.boxes) - len(reference.boxes)) <= slack and matched >= len(reference.boxes) - 1:
        return None
    return f"{len(got.boxes)} boxes vs plain's {len(reference.boxes)}, {matched} found again"


def detail(reference: Outcome, got: Outcome) -> str:
    """A note for an agreeing detector row: box counts and region IoU; "" for classifiers."""
    if reference.classes:
        return ""
    overlap = region_iou(reference.boxes, got.boxes)
    return f"{len(got.boxes)} boxes (plain {len(reference.boxes)}), region IoU {overlap:.2f}"


def region_iou(a: tuple[BoxTuple, ...], b: tuple[BoxTuple, ...]) -> float:
    """IoU of the pixel areas covered by two sets of boxes (1.0 when both are empty)."""
    if not a and not b:
        return 1.0
    width = math.ceil(max(box[2] for box in (*a, *b))) + 1
    height = math.ceil(max(box[3] for box in (*a, *b))) + 1
    masks = []
    for boxes in (a, b):
        mask = np.zeros((height, width), bool)
        for x0, y0, x1, y1 in boxes:
            mask[round(y0) : round(y1), round(x0) : round(x1)] = True
        masks.append(mask)
    union = int(np.count_nonzero(masks[0] | masks[1]))
    return int(np.count_nonzero(masks[0] & masks[1])) / union if union else 1.0


def iou(a: BoxTuple, b: BoxTuple) -> float:
    """Intersection over union of two (x0, y0, x1, y1) boxes."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
