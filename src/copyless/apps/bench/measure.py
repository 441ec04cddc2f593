"""copyless-bench's pipelines timed against each other, copyless's one way
(:func:`copyless.types.round_medians`: each round runs every pipeline back to back, the order
alternating A B C, C B A... so that machine drift hits every pipeline alike; the round's
figure is a median; the result, the median over rounds).

Per round, a sync pipeline runs ``ceil(frames / batch)`` single batches, each timed: its
figure is the median batch time / batch. An async pipeline runs the same number of batches
(at least :data:`MIN_ASYNC_BATCHES`) as one pipelined stream, prime to drain: its figure is
wall / frames. One untimed warm-up round comes first (bindings, plans, slots, lazy kernels;
its laps are dropped). Pipelines with a stopwatch also give, per round, their median seconds
per frame in each stage.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ...pipeline import StageClock
from ...types import round_medians
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


def interleaved(
    pipelines: list[Contender],
    frames: int,
    batch: int,
    rounds: int,
    failed: Callable[[Contender, Exception], None],
) -> Samples:
    """Every pipeline's samples (see the module docstring).

    A pipeline that raises is reported through ``failed`` and runs no more; it has no
    figures (its row is the failure).
    """
    broken: set[str] = set()

    def guarded(pipeline: Contender, batches: int) -> Callable[[], None]:
        def call() -> None:
            if pipeline.name in broken:
                return
            try:
                pipeline.run(batches)
            except Exception as exc:  # noqa: BLE001 - one broken pipeline must not stop the rest
                broken.add(pipeline.name)
                failed(pipeline, exc)

        return call

    calls: dict[str, Callable[[], None]] = {}
    runs: dict[str, int] = {}
    per_call: dict[str, int] = {}  # frames one timed call processes
    for pipeline in pipelines:
        count = batches_per_round(pipeline, frames, batch)
        stream = pipeline.asynchronous
        calls[pipeline.name] = guarded(pipeline, count if stream else 1)
        runs[pipeline.name] = 1 if stream else count
        per_call[pipeline.name] = count * batch if stream else batch
    out = Samples({p.name: [] for p in pipelines}, {p.name: StageClock() for p in pipelines})

    def flush(into: Callable[[Contender], StageClock]) -> None:
        for pipeline in pipelines:
            if pipeline.watch is not None:
                pipeline.watch.flush(into(pipeline))

    for pipeline in pipelines:  # the warm-up round, untimed
        for _ in range(runs[pipeline.name]):
            calls[pipeline.name]()
    flush(lambda _: StageClock())  # its laps are dropped

    def more(done: int) -> bool:
        flush(lambda pipeline: out.stages[pipeline.name])
        return done < rounds

    found = round_medians(calls, runs, more)
    for name, figures in found.items():
        if name not in broken:
            out.rounds[name] = [seconds / per_call[name] for seconds in figures]
    return out
