"""The OCR peers and the measures the OCR issue names, for the tests and benchmarks/ocr.py.

Peers: RapidOCR 3.x's own pipeline (``rapidocr``, PP-OCRv6) for copyless's v6 models and
``rapidocr_onnxruntime``'s (PP-OCRv4) for v4, each as a user writes it
(``RapidOCR()(path)``, default config: angle classifier on, text score 0.5). Measures:
character error rate against the drawn truth, and the share of lines whose text equals the
peer's (lines paired by box overlap). Imported by basename (this folder is on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class PeerLine:
    box: tuple[int, int, int, int]
    text: str
    score: float


@functools.cache
def peer(generation: str) -> Any:
    """RapidOCR's pipeline for ``generation`` (v6: rapidocr 3.x, v4: rapidocr_onnxruntime)."""
    with contextlib.redirect_stdout(io.StringIO()):
        if generation == "v6":
            from rapidocr import RapidOCR

            engine = RapidOCR(params={"Global.log_level": "error"})
        else:
            from rapidocr_onnxruntime import RapidOCR

            engine = RapidOCR()
    logging.getLogger("RapidOCR").setLevel(logging.ERROR)
    return engine


def peer_read(generation: str, image: Any) -> list[PeerLine]:
    """The peer's lines for a path or an RGB array (the peers take BGR arrays: converted)."""
    engine = peer(generation)
    source = image[..., ::-1].copy() if isinstance(image, np.ndarray) else str(image)
    if generation == "v6":
        out = engine(source)
        if out.boxes is None or out.txts is None:
            return []
        rows = zip(out.boxes, out.txts, out.scores, strict=True)
    else:
        result, _ = engine(source)
        rows = ((np.asarray(b), t, s) for b, t, s in (result or []))
    lines = []
    for quad, text, score in rows:
        q = np.asarray(quad, dtype=float)
        box = (int(q[:, 0].min()), int(q[:, 1].min()), int(q[:, 0].max()), int(q[:, 1].max()))
        lines.append(PeerLine(box, str(text), float(score)))
    return lines


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions)."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def cer(truth: list[str], read: list[str]) -> float:
    """Character error rate of the lines read against the truth, both joined by newlines."""
    reference = "\n".join(truth)
    return edit_distance(reference, "\n".join(read)) / max(1, len(reference))


def _iou(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def same_lines(ours: list[tuple[tuple[int, ...], str]], theirs: list[PeerLine]) -> tuple[int, int]:
    """(lines whose text equals the peer line they overlap most, lines in the union):
    every line of either side that has no partner counts as different."""
    same, paired = 0, set()
    for box, text in ours:
        scores = [(_iou(box, p.box), k) for k, p in enumerate(theirs) if k not in paired]
        best = max(scores, default=(0.0, -1))
        if best[0] >= 0.5:
            paired.add(best[1])
            same += text == theirs[best[1]].text
    return same, len(ours) + len(theirs) - len(paired)
