"""Stage timing and item counts: the one owner of both for copyless's pipelines and apps.

:class:`StageClock` keeps, per stage, a count, a total and the most recent
:data:`WINDOW` samples (percentiles are over those: memory stays flat however many items
run). :class:`ItemCounts` counts items per source. Both are thread-safe; :meth:`snapshot`
gives frozen figures (:class:`StageStats`, :class:`PipelineStats`) to print or serve.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Samples kept per stage for the percentiles.
WINDOW = 4096


@dataclass(frozen=True, slots=True)
class StageStats:
    """One stage's figures, seconds: ``count`` samples summing to ``total``; ``p50`` and
    ``p99`` over the most recent :data:`WINDOW` samples."""

    count: int = 0
    total: float = 0.0
    p50: float = 0.0
    p99: float = 0.0

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted samples (0.0 for none)."""
    if not ordered:
        return 0.0
    rank = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[rank]


class StageClock:
    """Seconds per stage, added from any thread."""

    def __init__(self, stages: Iterable[str] = (), window: int = WINDOW) -> None:
        self._lock = threading.Lock()
        self._window = window
        self._recent: dict[str, collections.deque[float]] = {}
        self._count: dict[str, int] = {}
        self._total: dict[str, float] = {}
        for stage in stages:
            self._open(stage)

    def _open(self, stage: str) -> None:
        self._recent[stage] = collections.deque(maxlen=self._window)
        self._count[stage] = 0
        self._total[stage] = 0.0

    def add(self, stage: str, seconds: float) -> None:
        with self._lock:
            if stage not in self._recent:
                self._open(stage)
            self._recent[stage].append(seconds)
            self._count[stage] += 1
            self._total[stage] += seconds

    def add_all(self, timings: Mapping[str, float]) -> None:
        for stage, seconds in timings.items():
            self.add(stage, seconds)

    def snapshot(self) -> dict[str, StageStats]:
        with self._lock:
            recent = {stage: sorted(values) for stage, values in self._recent.items()}
            counts, totals = dict(self._count), dict(self._total)
        return {
            stage: StageStats(counts[stage], totals[stage], _percentile(ordered, 0.5),
                              _percentile(ordered, 0.99))
            for stage, ordered in recent.items()
        }


@dataclass(frozen=True, slots=True)
class SourceStats:
    """Items of one source: ``pulled`` from it, ``done`` (no error), ``failed``."""

    pulled: int = 0
    done: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class PipelineStats:
    """A pipeline's figures so far (all its runs).

    ``done``: items delivered without an error; ``failed``: items delivered with one;
    ``in_flight``: items pulled and not yet delivered; ``sources``: per source key (None
    for ``map``); ``stages``: per stage (``prepare``, ``wait``, ``infer``, ``finish``, and
    ``source``: the time spent pulling items from their sources); ``elapsed``: seconds the runs took
    (from the first pull to the last result of each, summed); ``items_per_second``: items
    completed (done or failed) per second of that.
    """

    done: int = 0
    failed: int = 0
    in_flight: int = 0
    sources: Mapping[Any, SourceStats] = field(default_factory=dict)
    stages: Mapping[str, StageStats] = field(default_factory=dict)
    elapsed: float = 0.0

    @property
    def completed(self) -> int:
        return self.done + self.failed

    @property
    def items_per_second(self) -> float:
        return self.completed / self.elapsed if self.elapsed > 0 else 0.0

    def lines(self) -> list[str]:
        """A printable block: one line per stage (mean, p50, p99 in ms), then the counts."""
        lines = [
            f"{stage:<10}{s.mean * 1e3:9.3f} ms mean {s.p50 * 1e3:9.3f} p50 {s.p99 * 1e3:9.3f} p99"
            for stage, s in self.stages.items()
            if s.count
        ]
        lines.append(f"items     {self.done} done, {self.failed} failed, "
                     f"{self.items_per_second:.3f} items/s")  # fmt: skip
        return lines


class ItemCounts:
    """Items per source, and the runs' elapsed time; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pulled: dict[Any, int] = {}
        self._done: dict[Any, int] = {}
        self._failed: dict[Any, int] = {}
        self._elapsed = 0.0
        self._started: float | None = None
        self._last = 0.0

    def start_run(self) -> None:
        with self._lock:
            self._started = None

    def pulled(self, source: Any) -> None:
        with self._lock:
            if self._started is None:
                self._started = time.perf_counter()
                self._last = self._started
            self._pulled[source] = self._pulled.get(source, 0) + 1

    def delivered(self, source: Any, failed: bool) -> None:
        with self._lock:
            table = self._failed if failed else self._done
            table[source] = table.get(source, 0) + 1
            t = time.perf_counter()
            if self._started is not None:
                self._elapsed += t - self._last
                self._last = t

    def snapshot(self, stages: dict[str, StageStats], in_flight: int) -> PipelineStats:
        with self._lock:
            keys = list(self._pulled)
            sources = {
                key: SourceStats(self._pulled[key], self._done.get(key, 0),
                                 self._failed.get(key, 0))
                for key in keys
            }
            return PipelineStats(
                sum(self._done.values()), sum(self._failed.values()), in_flight,
                sources, stages, self._elapsed,
            )  # fmt: skip
