"""Postprocessing that reads model outputs in place: classification top-k, DB text boxes.

Outputs are read through a numpy view of the output tensor's memory. Copies: only what is
small (the 1000 scores of a classifier row when they must be dequantized or widened to
float32); the text-probability map is labelled in place by the C kernel, without the GIL.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..types import LayoutError, NpuTensorInfo, QuantParameters
from . import _text
from ._extra import need
from ._formats import _tensor_array
from ._preprocess import Letterbox

logger = logging.getLogger(__name__)

#: An output: a tensor, a numpy array, or an ``(array, info)`` pair.
Output = NpuTensor | npt.NDArray[Any] | tuple[Any, NpuTensorInfo]


@dataclass(frozen=True, slots=True)
class Box:
    """An axis-aligned box in source-image pixels (``x1``/``y1`` exclusive) with its score."""

    x0: float
    y0: float
    x1: float
    y1: float
    score: float

    @property
    def width(self) -> float:
        return self.x1 - self.x0

    @property
    def height(self) -> float:
        return self.y1 - self.y0


def softmax_topk(
    output: Output, k: int = 5, quant: QuantParameters | None = None, *, batch_index: int = 0
) -> list[tuple[int, float]]:
    """The ``k`` most probable classes of row ``batch_index`` as ``(class_id, probability)``.

    ``output`` is a ``[N, classes]`` (or ``[N, classes, 1, 1]``) logits tensor: float (any
    width) or integer with ``quant`` to dequantize (``x = (q - zero_point) * scale``).
    ``quant`` is ignored for float outputs. Sorted by probability, highest first.
    """
    row = _row(_as_array(output), batch_index)
    if np.issubdtype(row.dtype, np.integer):
        if quant is None:
            raise LayoutError(
                f"a {row.dtype} output needs QuantParameters to dequantize its scores"
            )
        logits = (row.astype(np.float32) - np.float32(quant.zero_point)) * np.float32(quant.scale)
    else:
        logits = row.astype(np.float32, copy=False)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    k = min(k, logits.size)
    exp = np.exp(logits - logits.max())
    probs = exp / exp.sum()
    top = np.argpartition(-probs, k - 1)[:k]
    top = top[np.lexsort((top, -probs[top]))]
    return [(int(i), float(probs[i])) for i in top]


def text_boxes(
    prob_map: Output,
    letterbox: Letterbox,
    *,
    threshold: float = 0.3,
    box_threshold: float = 0.5,
    min_size: int = 3,
    unclip_ratio: float = 1.5,
    batch_index: int = 0,
) -> list[Box]:
    """Text boxes of a DB detector's ``[N, 1, H, W]`` probability map, in source pixels.

    Pixels with probability > ``threshold`` are grouped into 8-connected components; a
    component's box is its bounding box, kept when the mean probability over its pixels is
    at least ``box_threshold`` and its shorter side at least ``min_size`` map pixels. Kept
    boxes are grown as DB's unclip does for a rectangle (each side moves out by
    ``area * unclip_ratio / perimeter``), then mapped through ``letterbox`` (the map may be
    smaller than the canvas: it is scaled to ``letterbox.size``) and clipped to the image.
    Sorted top to bottom, then left to right.
    """
    plane = _plane(_as_array(prob_map), batch_index)
    map_h, map_w = plane.shape
    sx, sy = letterbox.size / map_w, letterbox.size / map_h
    boxes = []
    for x0, y0, x1, y1, count, total in _text.components(plane, float(threshold)):
        score = total / count
        w, h = x1 - x0, y1 - y0
        if score < box_threshold or min(w, h) < min_size:
            continue
        grow = w * h * unclip_ratio / (2.0 * (w + h))
        box = _to_source(
            (x0 - grow) * sx, (y0 - grow) * sy, (x1 + grow) * sx, (y1 + grow) * sy, letterbox
        )
        if box is not None:
            boxes.append(Box(*box, score=score))
    boxes.sort(key=lambda b: (b.y0, b.x0))
    return boxes


def draw_boxes(
    image: npt.NDArray[np.uint8],
    boxes: list[Box],
    out_path: str | os.PathLike[str],
    *,
    colour: tuple[int, int, int] = (255, 0, 0),
    width: int = 2,
) -> Path:
    """Save ``image`` (``(H, W, 3)`` uint8 RGB) with ``boxes`` outlined at ``out_path``, in
    the format its extension names (:func:`image_format`: ``.png``, ``.jpg``...).

    Copies the image once (Pillow draws on its own buffer); ``image`` is left unchanged.
    """
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be uint8 (H, W, 3) RGB, got {image.dtype} {image.shape}")
    path = Path(out_path)
    fmt = image_format(path)
    canvas = need("PIL.Image").fromarray(np.ascontiguousarray(image))
    draw = need("PIL.ImageDraw").Draw(canvas)
    for box in boxes:
        draw.rectangle(
            (box.x0, box.y0, max(box.x0, box.x1 - 1), max(box.y0, box.y1 - 1)),
            outline=colour,
            width=width,
        )
    canvas.save(path, format=fmt)
    logger.debug("wrote %d boxes to %s", len(boxes), path)
    return path


#: The image formats ``draw_boxes`` / ``draw_detections`` write, by file extension.
IMAGE_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".bmp": "BMP",
                 ".tif": "TIFF", ".tiff": "TIFF", ".webp": "WEBP"}  # fmt: skip


def image_format(path: str | os.PathLike[str]) -> str:
    """The Pillow format ``path``'s extension names (``out.jpg`` -> ``"JPEG"``); ValueError
    naming the path and the known extensions for any other (no silent PNG in a .jpg)."""
    suffix = Path(path).suffix.lower()
    if suffix not in IMAGE_FORMATS:
        known = ", ".join(IMAGE_FORMATS)
        raise ValueError(f"{path}: unknown image extension {suffix or '(none)'!r} (use {known})")
    return IMAGE_FORMATS[suffix]


def _as_array(output: Output) -> npt.NDArray[Any]:
    if isinstance(output, np.ndarray):
        return output
    return _tensor_array(output)[0]


def _row(array: npt.NDArray[Any], batch_index: int) -> npt.NDArray[Any]:
    if array.ndim == 1:
        rows = array[None]
    elif all(d == 1 for d in array.shape[2:]):
        rows = array.reshape(array.shape[:2])  # [N, C, 1, 1]: a view, no copy
    else:
        raise LayoutError(f"expected [N, classes] scores, got shape {array.shape}")
    if not 0 <= batch_index < rows.shape[0]:
        raise IndexError(f"batch_index {batch_index} out of range for {rows.shape[0]} rows")
    row: npt.NDArray[Any] = rows[batch_index]
    return row


def _plane(array: npt.NDArray[Any], batch_index: int) -> npt.NDArray[np.float32]:
    if array.ndim == 4 and array.shape[1] == 1:
        if not 0 <= batch_index < array.shape[0]:
            raise IndexError(f"batch_index {batch_index} out of range for {array.shape[0]} maps")
        plane: npt.NDArray[Any] = array[batch_index, 0]
    elif array.ndim == 2:
        plane = array
    else:
        raise LayoutError(f"expected a [N, 1, H, W] probability map, got shape {array.shape}")
    if plane.dtype != np.float32:
        plane = plane.astype(np.float32)  # a copy, for fp16/bf16/fp64 maps only
    return plane


def _to_source(
    x0: float, y0: float, x1: float, y1: float, letterbox: Letterbox
) -> tuple[float, float, float, float] | None:
    """Canvas box -> source pixels, clipped to the image; None when nothing is left."""
    ax, ay = letterbox.to_source(x0, y0)
    bx, by = letterbox.to_source(x1, y1)
    ax, bx = max(0.0, ax), min(float(letterbox.width), bx)
    ay, by = max(0.0, ay), min(float(letterbox.height), by)
    if bx <= ax or by <= ay:
        return None
    return ax, ay, bx, by
