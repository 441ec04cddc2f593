"""Timing alternatives against each other on a shared machine, one way for every caller (the
engine choice, the speed in a reduced precision's record: :mod:`._speed`): rounds of
back-to-back runs of each alternative, the first alternating round by round, each judged by
its best round median. A burst of load from elsewhere then lands in one alternative's round,
not in its best one."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

__all__ = ["best_round_medians"]

K = TypeVar("K", bound=Hashable)


def best_round_medians(
    calls: Mapping[K, Callable[[], object]],
    runs: int,
    more: Callable[[int], bool],
    *,
    warm: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[K, float]:
    """Each alternative's best round median, in milliseconds of ``clock`` (seconds). A round
    is ``runs`` calls of each alternative back to back (``warm`` more, untimed, before the
    first round's); rounds go on while ``more(rounds_done)`` is true (at least one)."""
    best: dict[K, float] = {}
    order = list(calls)
    rounds = 0
    while True:
        for key in order:
            times = []
            for _ in range(runs + (warm if rounds == 0 else 0)):
                began = clock()
                calls[key]()
                times.append(clock() - began)
            figure = statistics.median(times[-runs:]) * 1e3
            best[key] = min(best.get(key, figure), figure)
        order.reverse()
        rounds += 1
        if not more(rounds):
            return best
