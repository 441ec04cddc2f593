"""The OCR stages as :class:`copyless.Pipeline` ``prepare``/``finish`` pairs, and their items.

* Detector (one pipeline per input size, items :class:`PageItem`): :func:`place` decodes the
  page and writes it into the detector's RGBx input in one resize pass
  (:func:`~copyless.vision.place_page`); :func:`find_lines` reads the probability map in
  place (:func:`~copyless.vision.text_quads`) and returns the lines' quads in page pixels,
  in reading order.
* Recogniser (one pipeline per (batch, width) bucket) and angle classifier (items
  :class:`LineItem`, or ``None`` for a row left idle): :func:`warp` samples the line's crop from
  the decoded page straight into its row of the batch (:func:`~copyless.vision.warp_lines`);
  :class:`ReadText` decodes the row's CTC output in place, :func:`upside_down` reads the
  classifier's verdict.

Nothing here aliases a pipeline's tensors after ``finish`` returns: the values are plain
Python or new arrays.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..pipeline import ItemTensors
from ..types import CopylessError
from ..vision import (
    AnyImage,
    ReadLimit,
    decode,
    image_size,
    order_lines,
    place_page,
    text_quads,
    warp_lines,
)
from ._ctc import ctc_greedy
from ._geometry import PagePlan, page_plan

__all__ = ["Image", "LineItem", "PageItem", "ReadText", "find_lines", "page_of", "place",
           "upside_down", "warp"]  # fmt: skip

#: A page: a path, encoded bytes, a PIL image or a numpy array (read by
#: :func:`copyless.vision.decode`: upright, 16-bit and float samples scaled, RGB).
Image = AnyImage
_NO_SLOT = np.zeros(1, dtype=np.int32)


@dataclass(slots=True, eq=False)
class PageItem:
    """One page on its way through the detector: ``image`` as given, its ``plan`` (None
    when its header could not be read: ``error`` says why), the decoded ``pixels`` once
    :func:`place` ran, and the seconds decoding took."""

    index: int
    image: Image
    plan: PagePlan | None
    error: BaseException | None = None
    pixels: npt.NDArray[np.uint8] | None = None
    decode: float = 0.0


def page_of(index: int, image: Image, limit: ReadLimit | None = None) -> PageItem:
    """The page's plan from its file's header (nothing decoded yet: :func:`place` decodes
    it on a pipeline slot), or, for bytes, a PIL image or an array, from the pixels
    :func:`~copyless.vision.decode` gives (decoded here). A page that cannot be read, or
    whose decoding would take more memory than ``limit`` allows, carries the reason and
    fails in :func:`place`."""
    try:
        if isinstance(image, (str, os.PathLike)):
            height, width = image_size(image)
            if limit is not None:
                limit.check(os.fspath(image), height, width, os.stat(image).st_size)
            return PageItem(index, image, page_plan(height, width))
        t0 = time.perf_counter()
        pixels = decode(image, limit=limit)
        seconds = time.perf_counter() - t0
        return PageItem(index, image, page_plan(*pixels.shape[:2]), pixels=pixels, decode=seconds)
    except (OSError, ValueError, TypeError, CopylessError) as exc:
        return PageItem(index, image, None, exc)


def place(page: PageItem, inputs: ItemTensors) -> None:
    """Detector ``prepare``: decode the page (a file) and resize it into the input."""
    plan = page.plan
    if page.error is not None or plan is None:
        raise page.error or ValueError(f"page {page.index} has no size")
    if page.pixels is None:
        path = Path(cast("str | os.PathLike[str]", page.image))  # arrays come decoded
        t0 = time.perf_counter()
        pixels = decode(path)
        page.decode = time.perf_counter() - t0
        if pixels.shape[:2] != plan.page:
            raise ValueError(f"{path}: decoded {pixels.shape[1]}x{pixels.shape[0]}, its "
                             f"header says {plan.page[1]}x{plan.page[0]}")  # fmt: skip
        page.pixels = pixels
    place_page(page.pixels, inputs[0], plan.rect)


def find_lines(page: PageItem, outputs: ItemTensors) -> npt.NDArray[np.float64]:
    """Detector ``finish``: the DB quads ``[n, 4, 2]`` in page pixels, clipped, small ones
    dropped, in reading order (the probability map is read in place)."""
    plan = page.plan
    if plan is None:  # place() refused the page: no job ran for it
        raise ValueError(f"page {page.index} has no size")
    prob = outputs[0].numpy()[0, 0]
    quads, _scores = text_quads(prob)
    if not len(quads):
        return quads
    rx, ry, rw, rh = plan.rect
    ph, pw = plan.page
    pts = quads.copy()
    # RapidOCR rounds map -> page coordinates to whole pixels, then clips
    pts[..., 0] = np.clip(np.round((pts[..., 0] - rx) * pw / rw), 0, pw - 1)
    pts[..., 1] = np.clip(np.round((pts[..., 1] - ry) * ph / rh), 0, ph - 1)
    wide = np.linalg.norm(pts[:, 0] - pts[:, 1], axis=1).astype(int) > 3
    tall = np.linalg.norm(pts[:, 0] - pts[:, 3], axis=1).astype(int) > 3
    pts = pts[wide & tall]
    ordered: npt.NDArray[np.float64] = pts[order_lines(pts)]
    return ordered


@dataclass(frozen=True, slots=True)
class LineItem:
    """One line crop to sample: the decoded page, the crop's homography and width."""

    pixels: npt.NDArray[np.uint8]
    homography: npt.NDArray[np.float64]
    width: int


def warp(line: LineItem | None, inputs: ItemTensors) -> None:
    """Recogniser/classifier ``prepare``: the crop into this row (None: an idle row, left
    as it is; the other rows of its job do not read it)."""
    if line is None:
        return
    widths = np.array([line.width], dtype=np.int32)
    warp_lines(line.pixels, inputs[0].numpy(), line.homography[None], widths, _NO_SLOT)


def _row(outputs: ItemTensors) -> npt.NDArray[Any]:
    """The row's output ``[1, ...]``: its own view, or its row of an output shared by the
    job's rows (a data-dependent output: its produced shape)."""
    tensor: NpuTensor = outputs[0]
    whole = tensor.produced()
    row = outputs.row if whole.shape[0] > 1 else 0
    return whole[row : row + 1]


class ReadText:
    """Recogniser ``finish``: CTC greedy decoding of the row, read in place."""

    def __init__(self, characters: Sequence[str]) -> None:
        self._characters = characters

    def __call__(self, line: LineItem | None, outputs: ItemTensors) -> tuple[str, float] | None:
        if line is None:
            return None
        return ctc_greedy(_row(outputs), self._characters)[0]


def upside_down(line: LineItem | None, outputs: ItemTensors) -> float:
    """Classifier ``finish``: the probability it gives the line being turned 180 degrees
    (its verdict counts above ``CLS_THRESHOLD``, see :mod:`._orientation`)."""
    if line is None:
        return 0.0
    probs = _row(outputs)[0]
    return float(probs[1]) / max(float(probs.sum()), 1e-12)
