"""What an OCR pipeline returns: text lines with their boxes, and the time each stage took."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["OcrLine", "OcrResult", "PageTimes"]

Point = tuple[float, float]


@dataclass(frozen=True, slots=True)
class OcrLine:
    """One text line: ``box`` its axis-aligned bound (x0, y0, x1, y1) in image pixels,
    ``quad`` the detector's rotated rectangle (top-left, top-right, bottom-right,
    bottom-left), ``text`` and ``score`` (the recogniser's mean character probability)."""

    box: tuple[int, int, int, int]
    quad: tuple[Point, Point, Point, Point]
    text: str
    score: float

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: box, quad, text, score."""
        return {"box": list(self.box), "quad": [list(p) for p in self.quad], "text": self.text,
                "score": round(self.score, 5)}  # fmt: skip


@dataclass(slots=True)
class PageTimes:
    """Seconds spent per stage on one page, from its pipelines' stage timings
    (:attr:`copyless.Result.timings`): ``decode`` (reading the file), ``detect`` (the
    detector's input, run and box search), ``crops`` (line geometry, the crops sampled into
    the recogniser's and the angle classifier's inputs, the classifier's runs),
    ``recognise`` (the recogniser's runs and CTC decoding) and ``total`` (wall time since
    the previous page was done, or since this page was taken when that is later: with pages
    overlapped, the totals add up to the run). Time spent waiting for a slot is in none of
    the stages but ``total``."""

    decode: float = 0.0
    detect: float = 0.0
    crops: float = 0.0
    recognise: float = 0.0
    total: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"decode": self.decode, "detect": self.detect, "crops": self.crops,
                "recognise": self.recognise, "total": self.total}  # fmt: skip


@dataclass(frozen=True, slots=True)
class OcrResult:
    """The lines of one image in reading order (top to bottom, then left to right), its size
    (height, width) and the stage times."""

    lines: tuple[OcrLine, ...]
    size: tuple[int, int]
    times: PageTimes = field(default_factory=PageTimes, compare=False)

    @property
    def text(self) -> str:
        """The lines' text joined by newlines."""
        return "\n".join(line.text for line in self.lines)
