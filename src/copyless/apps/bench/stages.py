"""Per-stage laps of a benchmarked contender: decode, preprocess, infer, postprocess.

:class:`Stopwatch` takes laps of a running contender and flushes, per round, one sample per
stage (seconds per frame) into a :class:`copyless.pipeline.StageClock`, the one owner of
stage timing (the apps and the Pipeline keep theirs there too); the report reads its p50.
"""

from __future__ import annotations

import statistics
import time

from ...pipeline import StageClock

STAGES = ("decode", "preprocess", "infer", "postprocess")


def now() -> float:
    return time.perf_counter()


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

    def flush(self, into: StageClock) -> None:
        """Add this period's median seconds per frame of every stage that ran; start
        afresh."""
        for stage in STAGES:
            values = [batch[stage] for batch in self._batches]
            if any(values):
                into.add(stage, statistics.median(values))
        self._batches = []
        self._batch = dict.fromkeys(STAGES, 0.0)


def medians_ms(clock: StageClock) -> dict[str, float]:
    """Median ms per frame of every stage that has samples (the rounds' medians)."""
    return {stage: s.p50 * 1e3 for stage, s in clock.snapshot().items() if s.count}
