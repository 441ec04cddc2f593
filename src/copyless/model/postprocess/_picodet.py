"""PP-PicoDet (GFL head) decoding in the graph, as rapid-layout's ``PPPostProcess`` does it.

The outputs, in order, are the class scores of strides 8, 16, 32, 64 (``[1, K, C]``, already
sigmoid) then their box distributions (``[1, K, 4 * B]``, B = 8 bins). For every cell of a
stride ``s`` (``K = ceil(H / s) * ceil(W / s)`` cells, centre ``((j + 0.5) s, (i + 0.5) s)``)::

    distance = sum_b softmax(bins)[b] * b * s      (left, top, right, bottom)
    box      = (cx - left, cy - top, cx + right, cy + bottom)

Per stride only the 1000 cells with the highest class score stay (the reference's
``nms_top_k``), per class only the 200 best candidates enter NMS (its ``candidate_size``) and
NMS keeps at most 100 boxes per class (its ``keep_top_k``); boxes are clipped to the model
input and scaled to the frame after NMS, as the reference does. Defaults: score > 0.5,
IoU 0.5 (``RapidLayout``'s).
"""

from __future__ import annotations

import math

import numpy as np

from ...types import UnsupportedError
from ._nms import Candidates
from ._ops import Ops

__all__ = ["BINS", "STRIDES", "decode"]

STRIDES = (8, 16, 32, 64)
BINS = 8
TOP_PER_STRIDE = 1000
CANDIDATES_PER_CLASS = 200
KEEP_PER_CLASS = 100


def decode(
    ops: Ops, heads: list[tuple[str, tuple[int, ...]]], size: tuple[int, int], batch: int = 1
) -> Candidates:
    """Candidates from the heads ``[(tensor, shape)]`` of a model whose input is ``batch``
    images of ``size``."""
    height, width = size
    cells = [math.ceil(height / s) * math.ceil(width / s) for s in STRIDES]
    shapes = [shape for _, shape in heads]
    classes = shapes[0][2] if shapes and len(shapes[0]) == 3 else 0
    b = batch
    expected = [(b, k, classes) for k in cells] + [(b, k, 4 * BINS) for k in cells]
    if classes < 1 or shapes != expected:
        raise UnsupportedError(
            f"postprocess 'picodet' needs per-stride scores [{b}, K, C] then box distributions "
            f"[{b}, K, {4 * BINS}] for strides {list(STRIDES)} of a {height}x{width} input "
            f"(K = {cells}); the model gives {shapes}"
        )
    boxes, scores = [], []
    n = 0
    for level, stride in enumerate(STRIDES):
        k = cells[level]
        level_scores = ops.op("Reshape", heads[level][0], ops.i64(b, k, classes, tag="scores"))
        level_boxes = _boxes(ops, heads[level + len(STRIDES)][0], size, stride, (b, k))
        if k > TOP_PER_STRIDE:  # per image: the cells of the best class scores
            best, _ = ops.multi("TopK", [level_scores, ops.i64(1, tag="k")], 2, axis=2)
            best = ops.op("Reshape", best, ops.i64(b, k, tag="best"))
            _, keep = ops.multi("TopK", [best, ops.i64(TOP_PER_STRIDE, tag="k")], 2, axis=1)
            keep = ops.op("Reshape", keep, ops.i64(b, TOP_PER_STRIDE, 1, tag="keep"))
            level_scores = ops.op("GatherND", level_scores, keep, batch_dims=1)
            level_boxes = ops.op("GatherND", level_boxes, keep, batch_dims=1)
            k = TOP_PER_STRIDE
        boxes.append(level_boxes)
        scores.append(level_scores)
        n += k
    all_scores = ops.op("Transpose", ops.op("Concat", *scores, axis=1), perm=[0, 2, 1])
    if n > CANDIDATES_PER_CLASS:  # [B, C, n]
        all_scores = _best_per_class(ops, all_scores)
    return Candidates(
        boxes=ops.op("Concat", *boxes, axis=1),  # [B, n, 4]
        scores=all_scores,
        count=n,
        classes=classes,
        per_class=KEEP_PER_CLASS,
        batch=b,
    )


def _boxes(ops: Ops, head: str, size: tuple[int, int], stride: int, shape: tuple[int, int]) -> str:
    """Box distributions ``[B, k, 4 * BINS]`` -> corners ``[B, k, 4]`` in model-input pixels
    (``shape``: ``(B, k)``)."""
    b, k = shape
    bins = ops.op("Reshape", head, ops.i64(b * k * 4, BINS, tag="bins"))
    weights = np.arange(BINS, dtype=np.float32).reshape(BINS, 1) * stride
    distance = ops.op("MatMul", ops.op("Softmax", bins, axis=1), ops.const(weights, tag="bins"))
    distance = ops.op("Reshape", distance, ops.i64(b, k, 4, tag="distance"))
    rows, cols = np.meshgrid(
        np.arange(math.ceil(size[0] / stride)), np.arange(math.ceil(size[1] / stride)),
        indexing="ij",
    )  # fmt: skip
    cx, cy = (cols.ravel() + 0.5) * stride, (rows.ravel() + 0.5) * stride
    centres = np.stack([cx, cy, cx, cy], axis=1).astype(np.float32)
    signed = ops.op("Mul", distance, ops.const([-1.0, -1.0, 1.0, 1.0], tag="sides"))
    return ops.op("Add", ops.const(centres, tag="centres"), signed)


def _best_per_class(ops: Ops, scores: str) -> str:
    """Zero every score below its class's ``CANDIDATES_PER_CLASS``-th best ([B, C, n])."""
    top, _ = ops.multi(
        "TopK", [scores, ops.i64(CANDIDATES_PER_CLASS, tag="k")], 2, axis=2, largest=1
    )
    last = ops.op("Gather", top, ops.i64(CANDIDATES_PER_CLASS - 1, tag="last"), axis=2)
    keep = ops.op("GreaterOrEqual", scores, last)
    return ops.op("Where", keep, scores, ops.const(0.0))
