"""round_medians: the one way alternatives are timed against each other (the engine choice and
the BF16 record take the best round, the benchmark programs the median round), on a fake
clock whose every call takes what the test says."""

from __future__ import annotations

from typing import Any

import pytest

from copyless.types import best_round_medians, round_medians


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _timed(durations: dict[str, list[float]], clock: Clock, log: list[str]) -> dict[str, Any]:
    def call(key: str) -> None:
        log.append(key)
        clock.now += durations[key].pop(0)

    return {key: (lambda key=key: call(key)) for key in durations}


def test_every_round_median_in_round_order() -> None:
    clock, log = Clock(), []
    durations = {"a": [1.0, 0.1, 0.3, 0.2, 0.4, 0.2, 0.2], "b": [9.0, 0.5, 0.5, 0.6, 0.6]}
    found = round_medians(_timed(durations, clock, log), 2, lambda done: done < 2, warm=1,
                          clock=clock)  # fmt: skip
    # round 1: a (warm 1.0, then 0.1, 0.3), b (warm 9.0, ...); round 2: b, a
    assert log == ["a"] * 3 + ["b"] * 3 + ["b"] * 2 + ["a"] * 2
    assert found["a"] == pytest.approx([0.2, 0.3]) and found["b"] == pytest.approx([0.5, 0.6])
    assert durations["a"] == [0.2, 0.2]  # never called: two rounds only


def test_the_benchmarks_take_the_median_round(monkeypatch: pytest.MonkeyPatch) -> None:
    from copyless.apps.bench import timing

    rounds = {"a": [0.3, 0.1, 0.2], "b": [0.9, 0.4, 0.5]}
    asked = []

    def fake(calls: Any, runs: int, more: Any, *, warm: int) -> dict[str, list[float]]:
        asked.append((sorted(calls), runs, [more(n) for n in range(1, 4)], warm))
        return rounds

    monkeypatch.setattr(timing, "round_medians", fake)
    figures = timing.interleaved({"a": print, "b": print}, 5, 3)
    assert figures == {"a": 0.2, "b": 0.5}
    assert asked == [(["a", "b"], 5, [True, True, False], 1)]


def test_rounds_alternate_and_each_keeps_its_best_round_median() -> None:
    clock = Clock()
    log: list[str] = []
    # seconds per call, popped in call order: "a" has one slow round (a burst of load)
    durations = {
        "a": [9.0, 0.004, 0.004, 0.005, 0.050, 0.060, 0.070, 0.003, 0.003, 0.004],
        "b": [5.0, 0.006, 0.007, 0.006, 0.006, 0.006, 0.008, 0.008, 0.008, 0.008],
    }

    def call(key: str) -> None:
        log.append(key)
        clock.now += durations[key].pop(0)

    calls = {key: (lambda key=key: call(key)) for key in ("a", "b")}
    best = best_round_medians(calls, 3, lambda done: done < 3, warm=1, clock=clock)
    # round 1: a, b (each warm + 3); round 2: b, a; round 3: a, b
    assert log == ["a"] * 4 + ["b"] * 4 + ["b"] * 3 + ["a"] * 3 + ["a"] * 3 + ["b"] * 3
    assert best["a"] == pytest.approx(3.0)  # the warm 9 s run not counted, nor the 60 ms round
    assert best["b"] == pytest.approx(6.0)
    assert all(not left for left in durations.values())


def test_at_least_one_round_runs() -> None:
    counts = {"x": 0}

    def call() -> None:
        counts["x"] += 1

    best = best_round_medians({"x": call}, 2, lambda done: False)
    assert counts["x"] == 2 and best["x"] >= 0.0


def test_runs_may_differ_per_alternative() -> None:
    clock, log = Clock(), []
    durations = {"one": [0.5, 0.7], "three": [0.1, 0.2, 0.3, 0.3, 0.3, 0.1]}
    found = round_medians(_timed(durations, clock, log), {"one": 1, "three": 3},
                          lambda done: done < 2, clock=clock)  # fmt: skip
    assert log == ["one", "three", "three", "three", "three", "three", "three", "one"]
    assert found == {"one": pytest.approx([0.5, 0.7]), "three": pytest.approx([0.2, 0.3])}


def test_copyless_bench_times_its_pipelines_the_one_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """copyless-bench's pipelines go through round_medians: alternating rounds after one untimed
    warm-up round, a sync pipeline timed batch by batch, an async one as one stream; a pipeline
    that raises is reported once, runs no more and has no figures; per-stage laps are flushed
    once a round, the warm-up's dropped."""
    from copyless.apps.bench import measure
    from copyless.apps.bench.contender import Contender
    from copyless.apps.bench.stages import Stopwatch

    clock, log = Clock(), []
    monkeypatch.setattr(measure, "round_medians", _with_clock(round_medians, clock))
    watch = Stopwatch()
    laps = {"sync": 0.01, "async": 0.02}

    def runner(name: str) -> Any:
        def run(batches: int) -> None:
            log.append((name, batches))
            if name == "broken" and log.count(("broken", 1)) == 3:
                raise RuntimeError("engine fell over")
            clock.now += laps.get(name, 0.05) * batches
            if name == "sync":
                watch.start()
                watch.lap("infer")
                watch.frames(2)

        return run

    pipelines = [Contender("sync", "copyless", False, runner("sync"), watch=watch),
                 Contender("async", "copyless", True, runner("async")),
                 Contender("broken", "peer", False, runner("broken"))]  # fmt: skip
    failures: list[str] = []
    samples = measure.interleaved(
        pipelines, frames=4, batch=2, rounds=2,
        failed=lambda p, e: failures.append(f"{p.name}: {e}"),
    )  # fmt: skip
    # warm-up: sync 2 batches of 1, async one stream of 4 (MIN_ASYNC_BATCHES), broken 2;
    # round 1 in order (broken raises on its first timed call), round 2 reversed without it
    assert log[:5] == [("sync", 1), ("sync", 1), ("async", 4), ("broken", 1), ("broken", 1)]
    assert log[5:] == [("sync", 1), ("sync", 1), ("async", 4), ("broken", 1), ("async", 4),
                       ("sync", 1), ("sync", 1)]  # fmt: skip
    assert failures == ["broken: engine fell over"]
    assert samples.rounds["sync"] == pytest.approx([0.005, 0.005])  # 10 ms a batch of 2
    assert samples.rounds["async"] == pytest.approx([0.02 / 2] * 2)  # 4 x 20 ms / 8 frames
    assert samples.rounds["broken"] == []
    assert samples.stages["sync"].snapshot()["infer"].count == 2  # one per timed round


def _with_clock(fn: Any, clock: Clock) -> Any:
    return lambda calls, runs, more, **kw: fn(calls, runs, more, clock=clock, **kw)
