"""Reading and drawing the outputs of a detector compiled with ``postprocess=`` (boxes,
scores, classes and optional landmarks decoded and NMS-filtered inside the graph).

The outputs hold ``K`` detections at the start of buffers of ``max_detections`` rows; ``K``
is the tensors' ``produced_shape[0]`` after the job (see :class:`~copyless.NpuTensor`).
Reading copies only those ``K`` rows into Python floats.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ._extra import need
from ._formats import _tensor_array
from ._postprocess import Box, image_format
from ._preprocess import Letterbox

logger = logging.getLogger(__name__)

__all__ = ["Detection", "Placement", "detections", "draw_detections", "to_image"]

#: Where a preprocess put the photo in the model's frame: the :class:`Letterbox` that
#: :func:`letterbox` returns, or the ``(sx, sy)`` that :func:`stretch` returns.
Placement = Letterbox | tuple[float, float]

#: An output: a tensor (its first ``count`` rows are read) or a numpy array.
Rows = NpuTensor | npt.NDArray[Any]


@dataclass(frozen=True, slots=True)
class Detection:
    """One detection in frame pixels: its box and score, class id and name, and the
    landmark points ``((x, y), ...)`` of detectors that have them."""

    box: Box
    class_id: int
    label: str
    points: tuple[tuple[float, float], ...] = ()

    def line(self) -> str:
        """``box: X0 Y0 X1 Y1 CLASS_ID LABEL SCORE`` (what copyless-detect prints)."""
        b = self.box
        return (
            f"box: {b.x0:.1f} {b.y0:.1f} {b.x1:.1f} {b.y1:.1f} {self.class_id} {self.label} "
            f"{b.score:.3f}"
        )


def to_image(found: Sequence[Detection], placement: Placement) -> list[Detection]:
    """``found`` (in the model's frame pixels) mapped back to the photo's pixels.

    ``placement`` is what the preprocess returned: a :class:`Letterbox` (padding removed,
    scale undone, boxes clipped to the photo) or :func:`stretch`'s ``(sx, sy)`` (each axis
    scaled). Landmark points are mapped the same way. So one model compiled for one frame
    size serves photos of any size: stretch or letterbox the photo into its input tensor,
    run, read :func:`detections`, then ``to_image(found, placement)``. New objects; no
    tensor memory is read.
    """
    if isinstance(placement, Letterbox):
        return [_letterboxed(det, placement) for det in found]
    sx, sy = (float(v) for v in placement)
    return [
        Detection(
            Box(d.box.x0 * sx, d.box.y0 * sy, d.box.x1 * sx, d.box.y1 * sy, d.box.score),
            d.class_id,
            d.label,
            tuple((x * sx, y * sy) for x, y in d.points),
        )
        for d in found
    ]


def _letterboxed(det: Detection, placed: Letterbox) -> Detection:
    x0, y0 = placed.to_source(det.box.x0, det.box.y0)
    x1, y1 = placed.to_source(det.box.x1, det.box.y1)
    w, h = float(placed.width), float(placed.height)
    box = Box(min(max(x0, 0.0), w), min(max(y0, 0.0), h), min(max(x1, 0.0), w),
              min(max(y1, 0.0), h), det.box.score)  # fmt: skip
    points = tuple(placed.to_source(x, y) for x, y in det.points)
    return Detection(box, det.class_id, det.label, points)


def detections(
    boxes: Rows,
    scores: Rows,
    classes: Rows,
    labels: Sequence[str],
    *,
    count: int,
    landmarks: Rows | None = None,
) -> list[Detection]:
    """The first ``count`` detections (highest score first, as the graph sorts them).

    ``count`` is the outputs' ``produced_shape[0]``. A class id outside ``labels`` is named
    ``class<N>``. Raises ``ValueError`` when ``count`` exceeds the rows an output holds.
    """
    box_rows = _rows(boxes, count, "boxes").reshape(count, 4)
    score_rows = _rows(scores, count, "scores").reshape(count)
    class_rows = _rows(classes, count, "classes").reshape(count)
    point_rows = None if landmarks is None else _rows(landmarks, count, "landmarks")
    found = []
    for i in range(count):
        cid = int(class_rows[i])
        x0, y0, x1, y1 = (float(v) for v in box_rows[i])
        points: tuple[tuple[float, float], ...] = ()
        if point_rows is not None:
            xy = point_rows[i].reshape(-1, 2)
            points = tuple((float(x), float(y)) for x, y in xy)
        label = labels[cid] if 0 <= cid < len(labels) else f"class{cid}"
        found.append(Detection(Box(x0, y0, x1, y1, float(score_rows[i])), cid, label, points))
    return found


def _rows(output: Rows, count: int, what: str) -> npt.NDArray[Any]:
    array = output if isinstance(output, np.ndarray) else _tensor_array(output)[0]
    if isinstance(count, bool) or not 0 <= count <= (array.shape[0] if array.ndim else 0):
        raise ValueError(f"{what}: {count} detections asked, the output holds {array.shape}")
    rows: npt.NDArray[Any] = array[:count]
    return rows


_PALETTE = (
    (230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
    (70, 240, 240), (240, 50, 230), (128, 128, 0), (0, 128, 128), (170, 110, 40),
)  # fmt: skip


def draw_detections(
    image: npt.NDArray[np.uint8],
    found: Sequence[Detection],
    out_path: str | os.PathLike[str],
    *,
    width: int = 2,
) -> Path:
    """Save ``image`` (``(H, W, 3)`` uint8 RGB) with each detection's box outlined in its
    class colour, ``LABEL SCORE`` on a filled tab above it and its landmark points, in the
    format the extension of ``out_path`` names (:func:`~copyless.vision.image_format`).

    Copies the image once (Pillow draws on its own buffer); ``image`` is left unchanged.
    """
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be uint8 (H, W, 3) RGB, got {image.dtype} {image.shape}")
    path = Path(out_path)
    fmt = image_format(path)  # an unknown extension is refused before any drawing
    canvas = need("PIL.Image").fromarray(np.ascontiguousarray(image))  # the "vision" extra
    draw = need("PIL.ImageDraw").Draw(canvas)
    font = need("PIL.ImageFont").load_default(size=max(11, min(canvas.size) // 40))
    for det in reversed(found):  # the best last, on top
        colour = _PALETTE[det.class_id % len(_PALETTE)]
        b = det.box
        draw.rectangle((b.x0, b.y0, max(b.x0, b.x1 - 1), max(b.y0, b.y1 - 1)),
                       outline=colour, width=width)  # fmt: skip
        text = f"{det.label} {b.score:.2f}"
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        tab_h = bottom - top + 4
        y = b.y0 - tab_h if b.y0 >= tab_h else b.y0
        draw.rectangle((b.x0, y, b.x0 + right - left + 4, y + tab_h), fill=colour)
        draw.text((b.x0 + 2 - left, y + 2 - top), text, fill=(255, 255, 255), font=font)
        for x, y in det.points:
            draw.ellipse((x - 2, y - 2, x + 2, y + 2), fill=colour)
    canvas.save(path, format=fmt)
    logger.debug("wrote %d detections to %s", len(found), path)
    return path
