"""Fixtures for the OCR tests: one pipeline per installed PP-OCR generation, drawn pages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from copyless.ocr import DrawnPage, OcrPipeline, draw_page, installed_generations

GENERATIONS = installed_generations()
#: drawn pages small enough for a loaded 2-core machine, large enough for 11-12 lines
PAGE_SIZE = (700, 990)


@pytest.fixture(scope="module", params=GENERATIONS)
def ocr(request: pytest.FixtureRequest) -> Iterator[OcrPipeline]:
    """An OcrPipeline on each installed generation (v6: rapidocr 3.x, v4: rapidocr-onnxruntime)."""
    with OcrPipeline(request.param) as pipeline:
        yield pipeline


@pytest.fixture(scope="session")
def pages() -> list[DrawnPage]:
    return [draw_page(seed, size=PAGE_SIZE) for seed in range(3)]
