"""Per-stage timing: decode, preprocess, infer, postprocess, per frame.

:class:`StageTimes` holds seconds per frame for each stage (one sample per timed frame or
round) and prints the VART-ML samples' benchmark block; :class:`Stopwatch` takes laps of a
running pipeline into it. The apps (``copyless-zerocopy``, ``copyless-detect``) and
``copyless-bench`` both time with these.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

STAGES = ("decode", "preprocess", "infer", "postprocess")


def now() -> float:
    return time.perf_counter()


@dataclass
class StageTimes:
    """Seconds per frame of each stage, one sample per timed frame (apps) or round (bench)."""

    decode: list[float] = field(default_factory=list)
    preprocess: list[float] = field(default_factory=list)
    infer: list[float] = field(default_factory=list)
    postprocess: list[float] = field(default_factory=list)

    def samples(self, stage: str) -> list[float]:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
        values: list[float] = getattr(self, stage)
        return values

    def medians_ms(self) -> dict[str, float]:
        """Median ms per frame of every stage that has samples."""
        return {s: statistics.median(self.samples(s)) * 1e3 for s in STAGES if self.samples(s)}

    def block(self) -> list[str]:
        """The seed's lines: per-stage ms / frame (means), total, and the two FPS figures."""
        n = max(1, len(self.infer))
        pre = sum(self.preprocess) / n * 1000.0
        inf = sum(self.infer) / n * 1000.0
        post = sum(self.postprocess) / n * 1000.0
        total = pre + inf + post
        return [
            f"{'preprocess':<24}{pre:.3f} ms / frame",
            f"{'infer':<24}{inf:.3f} ms / frame",
            f"{'postprocess':<24}{post:.3f} ms / frame",
            f"{'total':<24}{total:.3f} ms / frame",
            f"{'throughput (infer)':<24}{1000.0 / inf if inf else 0.0:.3f} FPS",
            f"{'throughput (pipeline)':<24}{1000.0 / total if total else 0.0:.3f} FPS",
        ]


class Stopwatch:
    """Laps of a running pipeline: ``start()``, then ``lap(stage)`` after each stage and
    ``frames(n)`` at the end of each batch of ``n`` frames. :meth:`flush` turns the batches
    since the last flush into one sample per stage: the median over those batches of the
    stage's seconds per frame (medians, as the rounds' own figures, so that one preempted
    batch does not move them)."""

    __slots__ = ("_batch", "_batches", "_last")

    def __init__(self) -> None:
        self._batch = dict.fromkeys(STAGES, 0.0)
        self._batches: list[dict[str, float]] = []
        self._last = 0.0

    def start(self) -> None:
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        t = time.perf_counter()
        self._batch[stage] += t - self._last
        self._last = t

    def frames(self, count: int) -> None:
        """The batch that ``count`` frames went through since :meth:`start` is complete."""
        if count > 0:
            self._batches.append({k: v / count for k, v in self._batch.items()})
        self._batch = dict.fromkeys(STAGES, 0.0)

    def flush(self, into: StageTimes) -> None:
        """Append this period's median seconds per frame of every stage that ran; start
        afresh."""
        for stage in STAGES:
            values = [batch[stage] for batch in self._batches]
            if any(values):
                into.samples(stage).append(statistics.median(values))
        self._batches = []
        self._batch = dict.fromkeys(STAGES, 0.0)
