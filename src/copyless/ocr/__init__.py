"""OCR: PP-OCR text detection, crops and recognition as one zero-copy pipeline.

::

    from copyless.ocr import OcrPipeline
    with OcrPipeline() as ocr:                 # PP-OCRv6 from rapidocr 3.x where installed
        for line in ocr.read("page.png").lines:
            print(line.box, line.score, line.text)

A layer above :mod:`copyless.runner`, beside :mod:`copyless.apps` and :mod:`copyless.ray`.
The models come from the zoo (``ppocr-v6-*``: ``rapidocr`` 3.x; ``ppocr-v4-*``:
``rapidocr-onnxruntime``); see :class:`OcrPipeline` for what is copied and what is not.
"""

from __future__ import annotations

from ._batch import LINE_COLUMNS, OcrBatchReader, line_schema
from ._models import OcrModels, installed_generations
from ._pages import DrawnPage, draw_page
from ._pipeline import OcrError, OcrPipeline
from ._results import OcrLine, OcrResult, PageTimes

__all__ = [
    "LINE_COLUMNS",
    "DrawnPage",
    "OcrBatchReader",
    "OcrError",
    "OcrLine",
    "OcrModels",
    "OcrPipeline",
    "OcrResult",
    "PageTimes",
    "draw_page",
    "installed_generations",
    "line_schema",
]
