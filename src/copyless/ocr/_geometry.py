"""RapidOCR's page size policy, as one plan from the decoded page to the detector's input.

RapidOCR first bounds the page (long side at most 2000, short side at least 30, both then
rounded to multiples of 32), pads very flat pages with black rows above and below (height
at most 30, or wider than 8 heights), then resizes so the short side is at least 736
(``limit_type: min``), rounded to multiples of 32. Here those steps are one resize of the
decoded page into a rectangle of the detector's input (no intermediate image), and the plan
maps the detector's map coordinates back to page pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PagePlan", "page_plan"]

LIMIT_SIDE = 736
MIN_SIDE = 30
MAX_SIDE = 2000
MIN_HEIGHT = 30
WIDTH_HEIGHT_RATIO = 8


def _round32(value: float) -> int:
    return max(32, int(round(value / 32) * 32))


@dataclass(frozen=True, slots=True)
class PagePlan:
    """``size`` (height, width) of the detector input; ``rect`` (x, y, width, height) where
    the page lands in it; ``page`` (height, width) of the page."""

    size: tuple[int, int]
    rect: tuple[int, int, int, int]
    page: tuple[int, int]

    def to_page(self, x: float, y: float) -> tuple[float, float]:
        """Detector-map pixel -> page pixel."""
        rx, ry, rw, rh = self.rect
        return (x - rx) * self.page[1] / rw, (y - ry) * self.page[0] / rh


def page_plan(height: int, width: int, limit_side: int = LIMIT_SIDE) -> PagePlan:
    """The detector input for a ``height`` x ``width`` page (RapidOCR's policy)."""
    if height < 1 or width < 1:
        raise ValueError(f"page is empty: {height}x{width}")
    hb, wb = height, width
    if max(hb, wb) > MAX_SIDE:
        ratio = MAX_SIDE / max(hb, wb)
        hb, wb = _round32(int(hb * ratio)), _round32(int(wb * ratio))
    if min(hb, wb) < MIN_SIDE:
        ratio = MIN_SIDE / min(hb, wb)
        hb, wb = _round32(int(hb * ratio)), _round32(int(wb * ratio))
    pad = 0
    if hb <= MIN_HEIGHT or wb / hb > WIDTH_HEIGHT_RATIO:
        pad = int(abs(max(int(wb / WIDTH_HEIGHT_RATIO), MIN_HEIGHT) * 2 - hb) / 2)
    hp = hb + 2 * pad
    ratio = limit_side / min(hp, wb) if min(hp, wb) < limit_side else 1.0
    det_h, det_w = _round32(int(hp * ratio)), _round32(int(wb * ratio))
    top = round(pad * det_h / hp)
    bottom = max(top + 1, round((pad + hb) * det_h / hp))
    return PagePlan((det_h, det_w), (0, top, det_w, bottom - top), (height, width))
