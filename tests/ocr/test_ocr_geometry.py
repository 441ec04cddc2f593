"""RapidOCR's page size policy as one plan (copyless.ocr._geometry)."""

from __future__ import annotations

import pytest

from copyless.ocr._geometry import page_plan


@pytest.mark.parametrize(
    ("page", "size"),
    [
        ((1169, 827), (1184, 832)),  # short side >= 736: the page's own size, rounded to 32
        ((191, 384), (736, 1472)),  # skimage's page: short side up to 736
        ((10, 10), (736, 736)),  # tiny: up to 30 (-> 32), then to 736
        ((8000, 6000), (1984, 1504)),  # huge: long side bounded to 2000 first
    ],
)
def test_detector_size_follows_rapidocr(page: tuple[int, int], size: tuple[int, int]) -> None:
    plan = page_plan(*page)
    assert plan.size == size
    assert plan.rect == (0, 0, size[1], size[0])


def test_flat_pages_are_padded_above_and_below() -> None:
    plan = page_plan(20, 400)  # <= 30 rows: padded to 2 x max(400 / 8, 30) = 100 rows
    (h, w), (x, y, rw, rh) = plan.size, plan.rect
    assert (x, rw) == (0, w) and y > 0 and y + rh < h
    assert abs(rh / h - 20 / 100) < 0.02
    cx, cy = plan.to_page(w / 2, y + rh / 2)
    assert abs(cx - 200) < 1 and abs(cy - 10) < 1


def test_empty_page_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        page_plan(0, 10)
