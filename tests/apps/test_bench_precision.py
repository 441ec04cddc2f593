"""``python benchmarks/video.py|ray_batch.py --precision int8`` (issue 48, item 4): the app
benchmarks run copyless at INT8 against the plain fp32 peers end to end on a tiny input, and
print the agreement with the plain fp32 top-1 beside the speed, one line per side and the
ratio. Not timed: the figures come from quiet runs; a few frames or photos only check the
plumbing."""

from __future__ import annotations

import re

import pytest

from benchmark_helpers import BENCHMARKS, run_program

#: a small calibration set: the compile stays short (a warning says it is below the
#: recommended count; 8 photos gave a model agreeing on 3 of 8 frames, under the
#: benchmark's floor); the quiet runs use the default 128
CALIBRATION = ["--calibration", "32"]


def test_agreement_counts_the_sure_ones_and_missing_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from _app_precision import Agreement

    theirs = {"a": (1, 0.9), "b": (2, 0.2), "c": (3, 0.5), "d": (4, 0.8)}
    agree = Agreement.of({"a": 1, "b": 2, "c": 9}, theirs)  # "d": missing on our side
    assert (agree.same, agree.total, agree.sure_same, agree.sure_total) == (2, 4, 1, 3)
    assert agree.line("frames").startswith("top-1 as the plain fp32 on 50.0% of 4 frames, "
                                           "33.3% of the 3 it is sure of")  # fmt: skip


@pytest.mark.slow
def test_video_benchmark_at_int8() -> None:
    done = run_program("video", "--frames", "8", "--rounds", "1", "--size", "120x160",
                       "--no-limits", "--precision", "int8", *CALIBRATION)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"^int8 model: top-1 as fp32 on ", out, re.M), out  # the compiler's record
    assert "-m " in out and "-int8-" in out  # copyless-video ran the INT8 model
    assert re.search(r"^video copyless \(int8\): [\d.]+ frames/s; top-1 as the plain fp32 on "
                     r"[\d.]+% of 8 frames, ([\d.]+%|-) of the \d+ it is sure of", out, re.M), out
    assert re.search(r"^video plain fp32: [\d.]+ frames/s", out, re.M), out
    assert re.search(r"^video: copyless int8 [\d.]+ frames/s, plain fp32 [\d.]+ frames/s, "
                     r"ratio [\d.]+x .* at [\d.]+% top-1 agreement", out, re.M), out


@pytest.mark.slow
def test_ray_batch_benchmark_at_int8() -> None:
    done = run_program("ray_batch", "--images", "2", "--rounds", "1", "--actors", "1",
                       "--batch-size", "2", "--precision", "int8", *CALIBRATION)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"^int8 model: top-1 as fp32 on ", out, re.M), out
    assert re.search(r"^ray batch, 1 actor\(s\), copyless-batch \(int8\): [\d.]+ images/s .*; "
                     r"top-1 as the plain fp32 on [\d.]+% of 2 small photos", out, re.M), out
    assert re.search(r"^ray batch, 1 actor\(s\), plain Ray guide \(fp32\): [\d.]+ images/s",
                     out, re.M), out  # fmt: skip
    assert re.search(r"^ray batch, 1 actor\(s\): copyless-batch int8 [\d.]+ images/s vs plain "
                     r"Ray guide fp32 [\d.]+ -> [\d.]+x whole process.* at [\d.]+% top-1 "
                     r"agreement", out, re.M), out
