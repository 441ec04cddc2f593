"""Timing alternatives against each other on a shared machine, one way for every caller: rounds
of back-to-back runs of each alternative, the first alternating round by round (A B, B A,
A B...), each round summed up by its median. A burst of load from elsewhere then lands in one
alternative's round, not in all of them.

:func:`round_medians` gives every round's figure; the callers differ only in the statistic
they take over the rounds, and say which: the engine choice and the speed in a reduced
precision's record (``runner/_choice.py``, ``model/_speed.py``) the best round
(:func:`best_round_medians`), the benchmark programs (``apps/bench/timing.py``) and
copyless-bench's pipelines (``apps/bench/measure.py``) the median round,
copyless-infer-async's passes (``apps/infer_async.py``) the sum of the rounds (the total a
pass takes, as VART's sample reports it)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

__all__ = ["best_round_medians", "round_medians"]

K = TypeVar("K", bound=Hashable)


def round_medians(
    calls: Mapping[K, Callable[[], object]],
    runs: int | Mapping[K, int],
    more: Callable[[int], bool],
    *,
    warm: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[K, list[float]]:
    """Each alternative's median seconds per call (of ``clock``) in every round, in round
    order. A round is ``runs`` calls of each alternative back to back (``runs`` may differ
    per alternative: a mapping; ``warm`` more, untimed, before the first round's); rounds go
    on while ``more(rounds_done)`` is true (at least one): ``more`` is also where a caller
    acts between rounds (a benchmark flushes its per-stage laps there)."""
    counts = {key: runs[key] if isinstance(runs, Mapping) else runs for key in calls}
    medians: dict[K, list[float]] = {key: [] for key in calls}
    order = list(calls)
    rounds = 0
    while True:
        for key in order:
            times = []
            for _ in range(counts[key] + (warm if rounds == 0 else 0)):
                began = clock()
                calls[key]()
                times.append(clock() - began)
            medians[key].append(statistics.median(times[-counts[key]:]))
        order.reverse()
        rounds += 1
        if not more(rounds):
            return medians


def best_round_medians(
    calls: Mapping[K, Callable[[], object]],
    runs: int,
    more: Callable[[int], bool],
    *,
    warm: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[K, float]:
    """Each alternative's best round median (:func:`round_medians`), in milliseconds."""
    found = round_medians(calls, runs, more, warm=warm, clock=clock)
    return {key: min(figures) * 1e3 for key, figures in found.items()}
