"""best_round_medians: the one way alternatives are timed against each other (the engine
choice, the BF16 record), on a fake clock whose every call takes what the test says."""

from __future__ import annotations

import pytest

from copyless.model import best_round_medians


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


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
