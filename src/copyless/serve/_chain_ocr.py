"""The OCR chain served as one model (detector -> line crops -> angle classifier ->
recogniser: :class:`copyless.ocr.OcrPipeline`'s chained Pipelines), for
:class:`~._chain.ServedChain`.

A model folder whose ``config.pbtxt`` says ``backend: "copyless-ocr"`` (no compiled model in
it: the PP-OCR models come from the zoo, compiled and cached on first use)::

    name: "ocr"
    backend: "copyless-ocr"
    parameters { key: "generation" value { string_value: "v6" } }   # or v4; default: newest
    parameters { key: "angle" value { string_value: "true" } }      # the angle classifier
    parameters { key: "runner" value { string_value: "onnxruntime" } }

Outputs, one row a text line in reading order: ``text`` ``BYTES [K]`` (UTF-8), ``boxes``
``FP32 [K, 4, 2]`` (each line's quadrilateral, image pixels: top-left, top-right,
bottom-right, bottom-left), ``scores`` ``FP32 [K]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..ocr import OcrPipeline, OcrResult, draw_page
from ..pipeline import Result
from ..types import RunnerType
from ..vision import ReadLimit
from ._chain_work import ChainAnswer
from ._images import BYTES
from ._tensors import ServedTensor

__all__ = ["OCR_BACKEND", "open_ocr"]

OCR_BACKEND = "copyless-ocr"
_OUTPUTS = (
    ServedTensor("text", BYTES, np.dtype(object), (-1,), (0,), False, True),
    ServedTensor("boxes", "FP32", np.dtype(np.float32), (-1, 4, 2), (0, 4, 2), False, True),
    ServedTensor("scores", "FP32", np.dtype(np.float32), (-1,), (0,), False, True),
)


class _OcrWork:
    """One OcrPipeline reading the served pages."""

    outputs = _OUTPUTS

    def __init__(self, ocr: OcrPipeline) -> None:
        self._ocr = ocr

    def warm(self) -> None:
        self._ocr.read(draw_page(0, size=(640, 480), lines=3).image)

    def map(self, pages: Iterator[bytes | memoryview]) -> Iterator[Result]:
        return self._ocr.map(pages)

    def answer(self, value: Any) -> ChainAnswer:
        result: OcrResult = value
        lines = result.lines
        times = result.times
        return ChainAnswer(
            {"text": np.array([line.text.encode() for line in lines], dtype=object),
             "boxes": np.array([line.quad for line in lines], np.float32).reshape(-1, 4, 2),
             "scores": np.array([line.score for line in lines], np.float32)},
            {"prepare": times.decode, "infer": times.detect + times.recognise,
             "finish": times.crops},
        )  # fmt: skip

    def close(self) -> None:
        self._ocr.close()


def open_ocr(folder: Path, parameters: Mapping[str, str], limit: ReadLimit) -> _OcrWork:
    """The OCR chain with its config's parameters (refused in one line if wrong); the
    folder holds only the config."""
    del folder
    unknown = sorted(set(parameters) - {"generation", "angle", "runner"})
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown}: the OCR chain takes generation, "
                         "angle, runner")  # fmt: skip
    angle = parameters.get("angle", "true").lower()
    if angle not in ("true", "false"):
        raise ValueError(f"parameter angle must be true or false, got {angle!r}")
    runner = parameters.get("runner", "onnxruntime").upper()
    if runner not in RunnerType.__members__:
        raise ValueError(f"parameter runner: unknown engine {runner.lower()!r}")
    ocr = OcrPipeline(parameters.get("generation") or None, angle=angle == "true",
                      runner_type=RunnerType[runner], read_limit=limit)  # fmt: skip
    return _OcrWork(ocr)
