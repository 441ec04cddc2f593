"""Interleaved timing: A, B, C, A, B, C ... so machine drift hits every pipeline alike.

Per round, a sync pipeline runs ``ceil(frames / batch)`` single batches, each timed; the
round's figure is the median batch time / batch. An async pipeline runs the same number of
batches (at least :data:`MIN_ASYNC_BATCHES`) as one pipelined stream, prime to drain; the
round's figure is wall / frames. The result is the median over rounds. Pipelines with a
stopwatch also give, per round, their mean seconds per frame in each stage.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ...pipeline import StageClock
from .contender import Contender

logger = logging.getLogger(__name__)

MIN_ASYNC_BATCHES = 4


@dataclass
class Samples:
    """Per pipeline: seconds per frame in each round, and per-stage seconds per frame."""

    rounds: dict[str, list[float]] = field(default_factory=dict)
    stages: dict[str, StageClock] = field(default_factory=dict)


def batches_per_round(pipeline: Contender, frames: int, batch: int) -> int:
    count = max(1, math.ceil(frames / batch))
    return max(count, MIN_ASYNC_BATCHES) if pipeline.asynchronous else count


def one_round(pipeline: Contender, frames: int, batch: int) -> float:
    """Seconds per frame of one round (see the module docstring)."""
    count = batches_per_round(pipeline, frames, batch)
    if pipeline.asynchronous:
        start = time.perf_counter()
        pipeline.run(count)
        return (time.perf_counter() - start) / (count * batch)
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        pipeline.run(1)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) / batch


def interleaved(
    pipelines: list[Contender],
    frames: int,
    batch: int,
    rounds: int,
    failed: Callable[[Contender, Exception], None],
) -> Samples:
    """Every pipeline's samples; one untimed warm-up round first.

    A pipeline that raises is reported through ``failed`` and dropped from later rounds.
    """
    live = list(pipelines)
    out = Samples({p.name: [] for p in pipelines}, {p.name: StageClock() for p in pipelines})
    for index in range(rounds + 1):
        for pipeline in list(live):
            try:
                seconds = one_round(pipeline, frames, batch)
            except Exception as exc:  # noqa: BLE001 - one broken pipeline must not stop the rest
                failed(pipeline, exc)
                live.remove(pipeline)
                continue
            # round 0 warms caches, bindings, slots and lazy kernels: its laps are dropped
            stages = out.stages[pipeline.name] if index else StageClock()
            if pipeline.watch is not None:
                pipeline.watch.flush(stages)
            if index:
                out.rounds[pipeline.name].append(seconds)
    return out
