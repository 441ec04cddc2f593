"""Which way up each text line is read, and the reading order, from the angle classifier.

RapidOCR turns a crop 90 degrees counter-clockwise when it is at least 1.5 times taller
than wide, then turns it 180 degrees more where its angle classifier (0 / 180 degrees) is
sure (> 0.9): each line on its own. On a page turned 90, 180 or 270 degrees that reads
most lines, but a line the classifier gets wrong comes out upside down, a short word
(squarish: never turned 90) comes out sideways, and the lines are listed in the turned
picture's order (on a page turned 180 degrees, last line first).

Here the page has an orientation too: the quarter turn (0-3, counter-clockwise, as the
crops are turned) that carries most of the text the classifier is sure about, weighted by
crop length. On an upright page every line keeps RapidOCR's own verdict. On a turned page,
every line whose shape allows it (not clearly wider than tall on a page turned 90 or 270
degrees; not clearly taller than wide on one turned 180) is read the page's way, and the
lines are ordered as on the upright page (top to bottom, then left to right there). Lines
that cannot follow the page (text running across it) keep their own verdict. Boxes stay in
the pixels of the image as given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..vision import order_lines

__all__ = ["CLS_THRESHOLD", "LineTurns", "orient_lines", "upright_corners"]

#: The angle classifier's probability above which its verdict counts (RapidOCR's).
CLS_THRESHOLD = 0.9
#: A crop this many times longer one way than the other has that way (RapidOCR's 1.5).
_CLEAR = 1.5

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class LineTurns:
    """Per line the quarter turns its crop takes (``quarters``, for
    :func:`~copyless.vision.line_crops`), the page's (``page``), and the lines' reading
    order on the upright page (``order``: indices into the quads)."""

    quarters: npt.NDArray[np.int64]
    page: int
    order: npt.NDArray[np.intp]


def orient_lines(quads: Floats, quarters: npt.ArrayLike, turned: npt.ArrayLike) -> LineTurns:
    """The turns of ``quads`` (``[n, 4, 2]`` image pixels) whose classifier crops were turned
    by ``quarters`` (RapidOCR's taller-than-wide rule) and read as turned 180 degrees with
    probability ``turned`` (see the module docstring)."""
    auto = np.asarray(quarters, dtype=np.int64) % 4
    p180 = np.asarray(turned, dtype=np.float64)
    own = (auto + 2 * (p180 > CLS_THRESHOLD)) % 4
    sure = np.maximum(p180, 1.0 - p180) > CLS_THRESHOLD
    width, height = _sides(quads)
    votes = np.bincount(own[sure], weights=np.maximum(width, height)[sure], minlength=4)
    page = int(np.argmax(votes)) if votes.sum() > 0 else 0
    if page == 0:
        return LineTurns(own, 0, np.arange(len(quads), dtype=np.intp))
    fits = width < _CLEAR * height if page % 2 else height < _CLEAR * width
    chosen = np.where(fits, page, own)
    return LineTurns(chosen, page, order_lines(upright_corners(quads, page)))


def upright_corners(quads: Floats, page: int) -> Floats:
    """``quads`` as corners on the upright page of a picture whose text is turned ``page``
    quarter turns (the crops' turn): each quad starts at the corner that is its top-left
    there, in upright coordinates (whose scale is the picture's: only the order matters)."""
    turned = np.take_along_axis(quads, ((np.arange(4) + page) % 4)[None, :, None], 1)
    x, y = turned[..., 0], turned[..., 1]
    if page == 1:  # text turned clockwise: upright x runs down the picture
        return np.stack([y, -x], axis=-1)
    if page == 2:
        return np.stack([-x, -y], axis=-1)
    if page == 3:
        return np.stack([-y, x], axis=-1)
    return turned


def _sides(quads: Floats) -> tuple[Floats, Floats]:
    """Each quad's width (longer of top and bottom) and height (longer of left and right)."""
    top = np.linalg.norm(quads[:, 0] - quads[:, 1], axis=1)
    bottom = np.linalg.norm(quads[:, 2] - quads[:, 3], axis=1)
    left = np.linalg.norm(quads[:, 0] - quads[:, 3], axis=1)
    right = np.linalg.norm(quads[:, 1] - quads[:, 2], axis=1)
    return np.maximum(top, bottom), np.maximum(left, right)
