"""Text lines between a DB text detector and a CTC recogniser (PP-OCR), without OpenCV.

``text_quads`` is PP-OCR's DB postprocess on a ``[H, W]`` probability map read in place:
threshold, 2x2 dilation, 8-connected components and their convex hulls (C, one pass),
then per component the minimum-area rectangle (rotating calipers over the hull's edges,
vectorised), the mean probability inside it ("fast" score), the unclip (each side moved
out by ``area * ratio / perimeter``, what pyclipper's round offset gives a rectangle once
its minimum-area rectangle is taken again) and the size filters. One rule more than
PP-OCR states: a component with more than ``max_holes`` holes is texture, not a text line
(see :data:`MAX_HOLES`).

``line_crops`` turns quads into the recogniser's crop geometry (RapidOCR's
``get_rotate_crop_image`` then ``resize_norm_img``: crop size from the quad's sides, tall
crops turned 90 degrees, height 48 and the width that keeps the aspect) and ``warp_lines``
samples them straight from the decoded image into the bound batch tensor in one pass
(perspective, resize, normalisation, padding): no crop image is ever made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _kernels, _text
from ._formats import Destination, _tensor_array, colour_format_for, image_view
from ._preprocess import _source

__all__ = ["LineCrops", "line_crops", "order_lines", "place_page", "text_quads", "warp_lines"]

Floats = npt.NDArray[np.float64]

#: Holes a text region may enclose. A DB text kernel is a solid band: 0 holes in every line
#: of the drawn pages (upright and turned 90/180 degrees) and of skimage's page(); a
#: textured photo gives a speckled region: coffee's whole-photo region has 464-472 holes
#: (PNG, JPEG), chelsea's face regions 10 and 23. RapidOCR drops such a region by accident
#: of its candidate cap: OpenCV's contour list counts every hole and speck, and lists the
#: big region's outline after its first 1000 (on coffee.png at score 0.504 it does not,
#: and reads "8" from the whole photo); the rule here says it outright.
MAX_HOLES = 8


def place_page(
    image: npt.NDArray[np.uint8], dst: Destination, rect: tuple[int, int, int, int]
) -> None:
    """Resize the whole ``image`` into ``rect`` (x, y, width, height) of image 0 of ``dst``
    (an RGBx/planar image input), black around it: a detector's input as RapidOCR pads and
    resizes a page, in one antialiased pass written in place."""
    src = _source(image)
    info = _tensor_array(dst)[1]
    fmt = colour_format_for(info)
    height, width = (info.shape[2], info.shape[3]) if info.shape[1] == 3 else info.shape[1:3]
    view = image_view(dst, fmt, height, width, 0)
    src_h, src_w = src.shape[:2]
    _kernels.resample(src, view, (0.0, 0.0, float(src_w), float(src_h)), rect, 0.0, fmt.bgr)


def text_quads(
    prob: npt.NDArray[np.float32],
    *,
    threshold: float = 0.3,
    box_threshold: float = 0.5,
    unclip_ratio: float = 1.6,
    dilate: bool = True,
    min_size: float = 3.0,
    max_candidates: int = 1000,
    max_holes: int | None = MAX_HOLES,
) -> tuple[Floats, Floats]:
    """DB boxes of a ``[H, W]`` float32 probability map (any strides, read in place).

    Returns ``(quads, scores)``: quads ``[n, 4, 2]`` float64 map pixels, corners top-left,
    top-right, bottom-right, bottom-left of each unclipped minimum-area rectangle, and the
    mean probability inside the rectangle before unclipping (kept when >= box_threshold).
    A region enclosing more than ``max_holes`` holes is dropped (None: PP-OCR's rules only).
    """
    if prob.ndim != 2:
        raise ValueError(f"probability map must be 2-D, got shape {prob.shape}")
    plane = prob if prob.dtype == np.float32 else prob.astype(np.float32)
    found = _text.regions(plane, float(threshold), bool(dilate))[:max_candidates]
    quads, scores = [], []
    for x0, y0, x1, y1, hull_bytes, holes in found:
        if min(x1 - x0, y1 - y0) < min_size:  # the rectangle's short side can only be smaller
            continue
        if max_holes is not None and holes > max_holes:
            continue
        hull = np.frombuffer(hull_bytes, dtype=np.int32).reshape(-1, 2).astype(np.float64)
        rect, short = _min_area_rect(hull)
        if short < min_size:
            continue
        score = _mean_inside(plane, rect)
        if score < box_threshold:
            continue
        grown, short = _unclip(rect, unclip_ratio)
        if short < min_size + 2:
            continue
        quads.append(grown)
        scores.append(score)
    if not quads:
        return np.zeros((0, 4, 2)), np.zeros(0)
    return np.stack(quads), np.asarray(scores)


def _min_area_rect(hull: Floats) -> tuple[Floats, float]:
    """The minimum-area rectangle of a convex hull's points, ordered as PP-OCR's
    ``get_mini_boxes`` orders them (by x, then by y within the left and right pairs), and its
    short side. A single point or a segment gives a degenerate rectangle."""
    if len(hull) < 3:
        lo, hi = hull.min(axis=0), hull.max(axis=0)
        corners = np.array([[lo[0], lo[1]], [hi[0], lo[1]], [hi[0], hi[1]], [lo[0], hi[1]]])
        return _mini_order(corners), float(min(hi - lo))
    edges = np.roll(hull, -1, axis=0) - hull
    lengths = np.hypot(edges[:, 0], edges[:, 1])
    keep = lengths > 0
    u = edges[keep] / lengths[keep, None]  # [e, 2] unit edge directions
    v = np.stack([-u[:, 1], u[:, 0]], axis=1)
    pu, pv = u @ hull.T, v @ hull.T  # [e, n] projections
    umin, umax, vmin, vmax = pu.min(1), pu.max(1), pv.min(1), pv.max(1)
    best = int(np.argmin((umax - umin) * (vmax - vmin)))
    a, b = u[best], v[best]
    corners = np.array(
        [a * umin[best] + b * vmin[best], a * umax[best] + b * vmin[best],
         a * umax[best] + b * vmax[best], a * umin[best] + b * vmax[best]]
    )  # fmt: skip
    short = float(min(umax[best] - umin[best], vmax[best] - vmin[best]))
    return _mini_order(corners), short


def _mini_order(corners: Floats) -> Floats:
    by_x = corners[np.argsort(corners[:, 0], kind="stable")]
    left = by_x[:2] if by_x[1, 1] > by_x[0, 1] else by_x[1::-1]
    right = by_x[2:] if by_x[3, 1] > by_x[2, 1] else by_x[3:1:-1]
    return np.array([left[0], right[0], right[1], left[1]])


def _mean_inside(plane: npt.NDArray[np.float32], quad: Floats) -> float:
    """Mean of ``plane`` over the pixels whose centres lie in the convex quad (corners
    truncated to integers first, as PP-OCR's fillPoly score does)."""
    h, w = plane.shape
    x0 = int(np.clip(np.floor(quad[:, 0].min()), 0, w - 1))
    x1 = int(np.clip(np.ceil(quad[:, 0].max()), 0, w - 1))
    y0 = int(np.clip(np.floor(quad[:, 1].min()), 0, h - 1))
    y1 = int(np.clip(np.ceil(quad[:, 1].max()), 0, h - 1))
    pts = quad.astype(np.int32).astype(np.float64)
    ys, xs = np.mgrid[y0 : y1 + 1, x0 : x1 + 1]
    inside = np.ones(xs.shape, dtype=bool)
    sign = 0.0
    for i in range(4):
        (ax, ay), (bx, by) = pts[i], pts[(i + 1) % 4]
        c = (bx - ax) * (ys - ay) - (by - ay) * (xs - ax)
        if sign == 0.0:
            area = (pts[1, 0] - pts[0, 0]) * (pts[2, 1] - pts[0, 1]) - (pts[1, 1] - pts[0, 1]) * (
                pts[2, 0] - pts[0, 0]
            )
            sign = 1.0 if area >= 0 else -1.0
        inside &= c * sign >= 0
    region = plane[y0 : y1 + 1, x0 : x1 + 1]
    if not inside.any():
        return float(region.mean())
    return float(region[inside].mean())


_ARC = np.stack(
    [np.cos(np.linspace(0, 2 * np.pi, 40, endpoint=False)),
     np.sin(np.linspace(0, 2 * np.pi, 40, endpoint=False))], axis=1
)  # fmt: skip


def _unclip(rect: Floats, ratio: float) -> tuple[Floats, float]:
    """The minimum-area rectangle of the rectangle offset outwards by
    ``area * ratio / perimeter`` with round corners, as PP-OCR's pyclipper unclip: the
    corners truncated to integers first, the offset outline on integer points."""
    side_a = np.linalg.norm(rect[1] - rect[0])
    side_b = np.linalg.norm(rect[3] - rect[0])
    perimeter = 2.0 * (side_a + side_b)
    if perimeter == 0:
        return rect, 0.0
    grow = side_a * side_b * ratio / perimeter
    outline = np.round(np.trunc(rect)[:, None, :] + grow * _ARC[None]).reshape(-1, 2)
    return _min_area_rect(_convex_hull(outline))


def _convex_hull(points: Floats) -> Floats:
    """Convex hull (Andrew's monotone chain) of a few dozen points, in order."""
    pts = np.unique(points, axis=0)  # sorted by x, then y
    if len(pts) < 3:
        return pts

    def chain(seq: Floats) -> list[Floats]:
        out: list[Floats] = []
        for p in seq:
            while len(out) >= 2:
                (ax, ay), (bx, by) = out[-2], out[-1]
                if (bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax) > 0:
                    break
                out.pop()
            out.append(p)
        return out

    lower, upper = chain(pts), chain(pts[::-1])
    return np.array(lower[:-1] + upper[:-1])


def order_lines(quads: Floats, row_gap: float = 10.0) -> npt.NDArray[np.intp]:
    """Reading order of quads (RapidOCR's ``sorted_boxes``): by top-left y, a new row where
    consecutive tops differ by ``row_gap`` pixels or more, left to right within a row."""
    if len(quads) == 0:
        return np.zeros(0, dtype=np.intp)
    ys = quads[:, 0, 1]
    by_y = np.argsort(ys, kind="stable")
    rows = np.concatenate([[0], np.cumsum(np.diff(ys[by_y]) >= row_gap)])
    order: npt.NDArray[np.intp] = by_y[np.lexsort((quads[by_y, 0, 0], rows))]
    return order


@dataclass(frozen=True, slots=True)
class LineCrops:
    """Crop geometry of n text lines for a recogniser of input height ``height``.

    ``homographies [n, 3, 3]`` map a pixel of the resized crop (``height`` rows,
    ``widths[i]`` columns) to the source image; ``ratios`` are the crops' width / height
    before resizing (RapidOCR sorts and buckets by them); ``quarters`` the quarter turns
    (0-3, counter-clockwise) each crop was turned by."""

    homographies: Floats
    widths: npt.NDArray[np.int32]
    ratios: Floats
    quarters: npt.NDArray[np.int8]


def _homographies(src: Floats, dst: Floats) -> Floats:
    """Per quad, the 3x3 projective map taking dst corners [n, 4, 2] to src corners."""
    n = len(src)
    a = np.zeros((n, 8, 8))
    b = np.zeros((n, 8))
    for i in range(4):
        x, y = dst[:, i, 0], dst[:, i, 1]
        u, v = src[:, i, 0], src[:, i, 1]
        a[:, 2 * i, 0], a[:, 2 * i, 1], a[:, 2 * i, 2] = x, y, 1.0
        a[:, 2 * i, 6], a[:, 2 * i, 7] = -x * u, -y * u
        a[:, 2 * i + 1, 3], a[:, 2 * i + 1, 4], a[:, 2 * i + 1, 5] = x, y, 1.0
        a[:, 2 * i + 1, 6], a[:, 2 * i + 1, 7] = -x * v, -y * v
        b[:, 2 * i], b[:, 2 * i + 1] = u, v
    h = np.linalg.solve(a, b[..., None])[..., 0]
    result: Floats = np.concatenate([h, np.ones((n, 1))], axis=1).reshape(n, 3, 3)
    return result


def line_crops(
    quads: Floats,
    *,
    height: int = 48,
    max_width: int | None = None,
    turn: Any = None,
    quarters: Any = None,
) -> LineCrops:
    """Crop geometry of image-pixel ``quads`` ``[n, 4, 2]`` (corners tl, tr, br, bl).

    As RapidOCR: the crop is ``max(top, bottom) x max(left, right)`` pixels (truncated),
    turned 90 degrees counter-clockwise when it is at least 1.5 times taller than wide;
    ``turn`` (a bool array) turns chosen crops 180 degrees more (the angle classifier's
    verdict). ``quarters`` (ints, counter-clockwise quarter turns per crop) replaces the
    taller-than-wide rule (``turn`` still adds to it). The resized width is
    ``ceil(height * ratio)``, capped at ``max_width``.
    """
    quads = np.asarray(quads, dtype=np.float64).reshape(-1, 4, 2)
    n = len(quads)
    top = np.linalg.norm(quads[:, 0] - quads[:, 1], axis=1)
    bottom = np.linalg.norm(quads[:, 2] - quads[:, 3], axis=1)
    left = np.linalg.norm(quads[:, 0] - quads[:, 3], axis=1)
    right = np.linalg.norm(quads[:, 1] - quads[:, 2], axis=1)
    cw = np.maximum(np.maximum(top, bottom).astype(np.int64), 1).astype(np.float64)
    ch = np.maximum(np.maximum(left, right).astype(np.int64), 1).astype(np.float64)
    if quarters is None:
        turns = np.where(ch / cw >= 1.5, 1, 0)
    else:
        turns = np.asarray(quarters, dtype=np.int64).reshape(n) % 4
    if turn is not None:
        turns = (turns + 2 * np.asarray(turn, dtype=np.int64).reshape(n)) % 4
    # a quarter turn counter-clockwise starts the crop at the next corner (tr, br, bl, tl)
    corners = np.take_along_axis(quads, ((np.arange(4) + turns[:, None]) % 4)[..., None], 1)
    odd = turns % 2 == 1
    cw, ch = np.where(odd, ch, cw), np.where(odd, cw, ch)
    ratios = cw / ch
    widths = np.ceil(height * ratios).astype(np.int64)
    if max_width is not None:
        widths = np.minimum(widths, max_width)
    widths = np.maximum(widths, 1)
    # resized pixel (x, y) -> crop pixel ((x + .5) * sx - .5, (y + .5) * sy - .5) -> source
    rect = np.zeros((n, 4, 2))
    rect[:, 1, 0] = rect[:, 2, 0] = cw
    rect[:, 2, 1] = rect[:, 3, 1] = ch
    to_src = _homographies(corners, rect) if n else np.zeros((0, 3, 3))
    sx, sy = cw / widths, ch / height
    scale = np.zeros((n, 3, 3))
    scale[:, 0, 0], scale[:, 0, 2] = sx, 0.5 * sx - 0.5
    scale[:, 1, 1], scale[:, 1, 2] = sy, 0.5 * sy - 0.5
    scale[:, 2, 2] = 1.0
    return LineCrops(to_src @ scale, widths.astype(np.int32), ratios, turns.astype(np.int8))


def warp_lines(
    image: npt.NDArray[np.uint8],
    batch: npt.NDArray[np.float32],
    homographies: Floats,
    widths: npt.NDArray[np.int32],
    slots: npt.NDArray[np.int32],
    *,
    mean: float = 127.5,
    std: float = 127.5,
) -> None:
    """Sample crops i into ``batch[slots[i]]`` (float32 ``[N, 3, H, W]``, written in place):
    ``widths[i]`` columns of ``(pixel - mean) / std``, the rest of the row zeroed.

    ``image`` is the decoded ``(H, W, 3|4)`` uint8 page, read in place; no copy is made."""
    if not (batch.flags.c_contiguous and batch.dtype == np.float32):
        raise ValueError("batch must be a C-contiguous float32 [N, 3, H, W] array")
    sizes = np.ascontiguousarray(np.stack([widths, slots], axis=1), dtype=np.int32)
    matrices = np.ascontiguousarray(homographies, dtype=np.float64)
    if math.isclose(std, 0.0):
        raise ValueError("std must not be 0")
    _text.warp(image, batch, matrices, sizes, 1.0 / std, -mean / std)
