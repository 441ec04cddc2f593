"""One stream's figures and what they mean, for everything that shows them: the closing
block's lines, the live page, ``/stats.json`` and the Prometheus metrics
(:mod:`._metrics`). :class:`copyless.vision.StreamStats` is the figures copyless-video
reads; a test may hand any object with these attributes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Figures(Protocol):
    """One stream's figures (latencies in seconds, decode to result)."""

    @property
    def index(self) -> int: ...
    @property
    def source(self) -> str: ...
    @property
    def decoded(self) -> int: ...
    @property
    def frames(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    @property
    def fps(self) -> float: ...
    @property
    def latency_p50(self) -> float: ...
    @property
    def latency_p99(self) -> float: ...
    @property
    def error(self) -> str | None: ...
    @property
    def finished(self) -> bool: ...


def stream_state(figures: Figures) -> str:
    """``"failed"`` (the stream stopped on an error), ``"ended"`` (its input ended and
    every frame is done) or ``"running"``: what the page, /stats.json and /metrics show."""
    if figures.error is not None:
        return "failed"
    return "ended" if figures.finished else "running"


def current_fps(figures: Figures) -> float:
    """The stream's results per second as shown: its mean rate, running or ended; 0 once
    it failed (a failed stream no longer shows the rate it had before it failed)."""
    return 0.0 if stream_state(figures) == "failed" else figures.fps


def stream_lines(figures: Sequence[Figures]) -> list[str]:
    """One closing line per stream: frames, FPS, latency p50/p99, drops, its error."""
    lines = []
    for s in figures:
        line = (
            f"stream {s.index}: {s.frames} frames, {s.fps:.1f} FPS, latency p50 "
            f"{s.latency_p50 * 1000.0:.1f} ms p99 {s.latency_p99 * 1000.0:.1f} ms, "
            f"dropped {s.dropped}"
        )
        lines.append(line + (" (failed)" if s.error is not None else ""))
    return lines
