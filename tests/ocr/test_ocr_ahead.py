"""Detection ahead of recognition across page sizes (copyless.ocr._ahead), on real models."""

from __future__ import annotations

import threading

import pytest

from copyless.ocr import OcrPipeline, draw_page
from copyless.ocr._pipeline import DETECTORS

#: three page sizes, alternating: every page starts a new detector run
SIZES = [(520, 400), (400, 520), (600, 380), (520, 400)]


@pytest.fixture(scope="module")
def mixed() -> list[tuple[object, tuple[str, ...]]]:
    pages = [draw_page(20 + k, size=size, lines=3) for k, size in enumerate(SIZES)]
    return [(page.image, page.lines) for page in pages]


def _detect_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "copyless-ocr-detect"]


def test_mixed_sizes_come_in_order_with_the_answers_of_single_reads(
    ocr: OcrPipeline, mixed: list[tuple[object, tuple[str, ...]]]
) -> None:
    alone = [ocr.read(image).text for image, _ in mixed]
    results = list(ocr.map([image for image, _ in mixed]))
    assert [r.index for r in results] == list(range(len(mixed)))
    assert [r.unwrap().text for r in results] == alone
    # spaces aside: PP-OCRv4 drops some between words (RapidOCR's v4 too)
    assert [r.unwrap().text.replace(" ", "") for r in results] == [
        "\n".join(t).replace(" ", "") for _, t in mixed
    ]
    assert len(ocr._det) <= DETECTORS
    assert not _detect_threads()


def test_leaving_early_ends_the_detection_thread(
    ocr: OcrPipeline, mixed: list[tuple[object, tuple[str, ...]]]
) -> None:
    results = ocr.map([image for image, _ in mixed] * 3)
    first = next(results)
    assert first.ok
    results.close()  # type: ignore[attr-defined]
    assert not _detect_threads()
    assert ocr.read(mixed[1][0]).text  # the pipeline goes on


def test_a_failure_opening_a_detector_is_raised_by_the_loop(
    mixed: list[tuple[object, tuple[str, ...]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    with OcrPipeline() as ocr:

        def refuse(size: tuple[int, int]) -> None:
            raise RuntimeError(f"no detector for {size}")

        monkeypatch.setattr(ocr, "_detector", refuse)
        with pytest.raises(RuntimeError, match="no detector"):
            list(ocr.map([image for image, _ in mixed]))
        assert not _detect_threads()
