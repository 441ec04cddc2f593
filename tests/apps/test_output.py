"""apps/_output: the one owner of the apps' stdout (human lines or JSON lines, --quiet) and
of when a progress bar is drawn."""

from __future__ import annotations

import io
import json
import os

import numpy as np

from copyless.apps._output import Output, progress_wanted


def test_human_lines_and_the_timing_block() -> None:
    stream = io.StringIO()
    out = Output(stream=stream)
    out.say("top-1: 285 Egyptian cat 0.372")
    out.record("label", rank=1)
    out.timing(["infer  1.000 ms / frame"], {"infer_ms": 1.0})
    out.summary(labels=1)
    assert stream.getvalue().splitlines() == ["top-1: 285 Egyptian cat 0.372",
                                              "infer  1.000 ms / frame"]  # fmt: skip


def test_json_lines_with_and_without_quiet() -> None:
    for quiet in (False, True):
        stream = io.StringIO()
        out = Output(json_lines=True, quiet=quiet, stream=stream)
        out.say("a human line")
        out.record("label", score=np.float32(0.5), shape=(1, 2), nan=float("nan"))
        out.timing(["infer  1.000 ms / frame"], {"infer_ms": 1.0})
        out.summary(labels=1)
        first, last = (json.loads(line) for line in stream.getvalue().splitlines())
        assert first == {"type": "label", "score": 0.5, "shape": [1, 2], "nan": None}
        expected = {"type": "summary", "labels": 1}
        assert last == (expected if quiet else {**expected, "timings": {"infer_ms": 1.0}})


def test_progress_only_on_a_terminal() -> None:
    assert not progress_wanted(io.StringIO())
    leader, follower = os.openpty()
    try:
        with open(follower, "w", closefd=False) as terminal:
            assert progress_wanted(terminal)
    finally:
        os.close(leader)
        os.close(follower)
