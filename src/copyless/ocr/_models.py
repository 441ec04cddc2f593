"""The PP-OCR models an :class:`~copyless.ocr.OcrPipeline` runs, compiled and cached.

Models come from the zoo (``ppocr-v6-*`` from ``rapidocr`` 3.x, ``ppocr-v4-*`` from
``rapidocr-onnxruntime``). Every shape the pipeline binds is compiled once and cached under
the zoo's cache root (``compiled/ocr-...rai``, keyed by the zoo file, which carries the
source version, and the compile options): the detector per input size with its
preprocessing folded in (packed RGBx uint8 in, ``(pixel - 127.5) / 127.5`` in the graph, as
RapidOCR normalises), the recogniser per (batch, width) bucket and the classifier once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import onnx

from ..model import zoo
from ..types import ModelLoadError, UnsupportedError

__all__ = ["OcrModels", "compiled", "installed_generations"]

logger = logging.getLogger(__name__)

#: RapidOCR normalises every PP-OCR input as (pixel / 255 - 0.5) / 0.5
PIXEL_MEAN = 127.5
PIXEL_STD = 127.5
_GENERATIONS = ("v6", "v4")
_PACKAGES = {"v6": "rapidocr", "v4": "rapidocr_onnxruntime"}


def installed_generations() -> list[str]:
    """PP-OCR generations whose package is installed, newest first (``v6``, ``v4``)."""
    found = []
    for generation in _GENERATIONS:
        try:
            zoo.cache_path(f"ppocr-{generation}-det")
        except UnsupportedError:
            continue
        found.append(generation)
    return found


def compiled(name: str, **options: Any) -> Path:
    """Zoo model ``name`` compiled with ``options``, from the zoo's one locked cache
    (:func:`copyless.model.zoo.compiled`: concurrent processes compile it once, nobody
    sees a partial model)."""
    return zoo.compiled(name, options, prefix=f"ocr-{name}")


@dataclass(frozen=True, slots=True)
class OcrModels:
    """One PP-OCR generation: zoo names of its models and the recogniser's characters
    (index 0 the CTC blank, then the model's list, then a space, as RapidOCR reads them)."""

    generation: str
    characters: tuple[str, ...]
    #: the recogniser's output (``[N, W / 8, classes]``); compiled with that capacity where
    #: the compiler cannot derive its shape (PP-OCRv4's)
    rec_output: str

    @classmethod
    def load(cls, generation: str | None = None) -> OcrModels:
        """The models of ``generation`` (``v6``, ``v4``; default the newest installed).

        Raises :class:`UnsupportedError` when its package is not installed and
        :class:`ModelLoadError` when the recogniser carries no character list."""
        if generation is None:
            installed = installed_generations()
            if not installed:
                raise UnsupportedError(
                    "no PP-OCR models installed: pip install rapidocr (or rapidocr-onnxruntime)"
                )
            generation = installed[0]
        if generation not in _GENERATIONS:
            raise UnsupportedError(f"unknown PP-OCR generation {generation!r}; use v6 or v4")
        characters, output = _recogniser_facts(generation)
        return cls(generation, characters, output)

    @property
    def package(self) -> str:
        """The import name of the package that ships these models."""
        return _PACKAGES[self.generation]

    def name(self, role: str) -> str:
        """The zoo name of ``role`` (det, rec, cls)."""
        return f"ppocr-{self.generation}-{role}"


@cache
def _recogniser_facts(generation: str) -> tuple[tuple[str, ...], str]:
    path = zoo.build(f"ppocr-{generation}-rec", progress=False)
    model = onnx.load(str(path), load_external_data=False)
    meta = {prop.key: prop.value for prop in model.metadata_props}
    text = meta.get("character", "")
    if not text.strip():
        raise ModelLoadError(
            f"the PP-OCR {generation} recogniser ({path.name}) has no character list"
        )
    return ("", *text.splitlines(), " "), model.graph.output[0].name
