"""copyless-bench on the real EfficientNet-Lite0 and photo: rows, ratios, limits, stages,
verdicts, JSON, PNG, gate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from copyless.apps.bench import cli
from copyless.apps.bench.contender import Contender
from copyless.apps.bench.gate import disagreement
from copyless.apps.bench.models import Config
from copyless.apps.bench.peers import plain
from copyless.apps.bench.report import Row, verdicts
from copyless.apps.bench.tasks import Outcome
from copyless.pipeline import StageClock

ONLY = ["engine-ort", "engine-ov", "ort-iobinding", "openvino-sync", "copyless-ort-zc",
        "copyless-ov-zc", "copyless-ort-async2"]  # fmt: skip
STAGES = {"decode", "preprocess", "infer", "postprocess"}
CAT = {281, 282, 285}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:
    out = tmp_path_factory.mktemp("bench")
    argv = ["--quick", "--batch", "1", "--precision", "fp32", "--only", ",".join(ONLY),
            "--json", str(out / "b.json"), "--png", str(out / "b.png")]  # fmt: skip
    code = cli.main(argv)
    return code, json.loads((out / "b.json").read_text()), out / "b.png"


def test_quick_run_rows_and_ratios(quick_run: tuple[int, dict, Path]) -> None:
    code, data, _ = quick_run
    assert code == 0
    rows = {r["pipeline"]: r for r in data["rows"]}
    assert set(rows) == {"plain", *ONLY}
    for row in rows.values():
        assert row["status"] == "ok", row  # every pipeline passed the correctness gate
        assert (row["model"], row["precision"], row["batch"]) == ("efficientnet-lite0", "fp32", 1)
        assert row["ms_per_frame"] > 0 and row["fps"] > 0
        assert row["fps"] == pytest.approx(1000.0 / row["ms_per_frame"])
        assert row["speedup"] == pytest.approx(rows["plain"]["ms_per_frame"] / row["ms_per_frame"])
        assert len(row["rounds_ms"]) == 1 and all(t > 0 for t in row["rounds_ms"])
    assert rows["plain"]["speedup"] == 1.0
    assert rows["copyless-ort-async2"]["mode"] == "async"
    assert rows["copyless-ort-zc"]["family"] == "copyless"
    assert data["machine"]["cores"] >= 1 and data["machine"]["onnxruntime"]
    assert data["settings"]["rounds"] == 1 and data["settings"]["decode"] is True


def test_engine_alone_rows_are_each_engines_limit(quick_run: tuple[int, dict, Path]) -> None:
    _, data, _ = quick_run
    rows = {r["pipeline"]: r for r in data["rows"]}
    for engine, limit in (("ort", "engine-ort"), ("ov", "engine-ov")):
        assert rows[limit]["family"] == "limit" and rows[limit]["vs_limit"] == 1.0
        for row in rows.values():
            if row["engine"] == engine:
                want = row["ms_per_frame"] / rows[limit]["ms_per_frame"]
                assert row["vs_limit"] == pytest.approx(want), row["pipeline"]
    assert rows["plain"]["engine"] == "ort" and rows["copyless-ov-zc"]["engine"] == "ov"
    assert "float32" in rows["engine-ov"]["note"]  # copyless's OpenVINO precision
    assert rows["engine-ort"]["stages_ms"] == {}  # nothing but the engine runs


def test_sync_pipelines_time_every_stage(quick_run: tuple[int, dict, Path]) -> None:
    _, data, _ = quick_run
    rows = {r["pipeline"]: r for r in data["rows"]}
    for name in ("plain", "ort-iobinding", "copyless-ort-zc", "copyless-ov-zc"):
        stages = rows[name]["stages_ms"]
        assert set(stages) == STAGES, name
        assert all(v > 0 for v in stages.values())
        assert sum(stages.values()) <= rows[name]["ms_per_frame"] * 1.5  # laps within the frame
    assert set(rows["openvino-sync"]["stages_ms"]) == {"decode", "infer", "postprocess"}
    assert rows["copyless-ort-async2"]["stages_ms"] == {}  # overlapped stages: no breakdown


def test_quick_run_png(quick_run: tuple[int, dict, Path]) -> None:
    _, _, png = quick_run
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_table_on_stdout(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["--quick", "--batch", "1", "--precision", "fp32", "--only", "copyless-ort-cpu",
            "--rounds", "1", "--frames", "1", "--predecoded",
            "--json", str(tmp_path / "t.json"), "--png", str(tmp_path / "t.png")]  # fmt: skip
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    table, breakdown, *_ = captured.out.strip().split("\n\n")
    lines = [line for line in table.splitlines() if "efficientnet-lite0 fp32 b1" in line]
    assert [line.split()[3] for line in lines] == ["plain", "copyless-ort-cpu"]
    assert "1.00x" in lines[0] and "x limit" in table
    staged = [line.split() for line in breakdown.splitlines()[2:4]]
    assert [row[3] for row in staged] == ["plain", "copyless-ort-cpu"]
    assert all(row[4] == "-" for row in staged)  # --predecoded: no decode stage
    assert "fastest copyless pipeline copyless-ort-cpu" in breakdown  # the verdict follows
    assert "NOT zero-copy" in breakdown  # the only copyless row is the CPU view
    assert "efficientnet-lite0 fp32 b1" in captured.err  # progress goes to stderr


def _zeros_pipeline(assets: cli.Assets) -> Contender:
    """The plain pipeline fed zeros instead of the photo: a deliberately wrong pipeline."""
    honest = plain(assets.peer_model, assets.task, assets.photo, assets.config.batch)
    import onnxruntime as ort

    session = ort.InferenceSession(str(assets.peer_model), providers=["CPUExecutionProvider"])
    x = np.zeros((1, 3, 224, 224), np.float32)

    def run(batches: int) -> Outcome:
        return assets.task.postprocess(session.run(None, {"input": x})[0][0])

    assert honest.run(1).classes[0] in CAT
    return Contender("zeros", "copyless", False, run)


def test_wrong_pipeline_is_flagged_and_not_timed() -> None:
    settings = cli.Settings(frames=1, rounds=1, pipelines=("plain",), photo=None)
    rows = cli.run_config(Config("efficientnet-lite0", "fp32", 1), settings, [_zeros_pipeline])
    by_name = {r.pipeline: r for r in rows}
    assert by_name["plain"].status == "ok"
    wrong = by_name["zeros"]
    assert wrong.status == "WRONG" and wrong.ms_per_frame is None and wrong.speedup is None
    assert "top-1" in wrong.note


def _row(name: str, ms: float, rounds: tuple[float, ...], engine: str = "ort") -> Row:
    return Row("m", "fp32", 1, name, "copyless", "sync", "ok", ms_per_frame=ms, rounds_ms=rounds,
               stages_ms={"infer": ms - 1.0, "preprocess": 1.0}, engine=engine)  # fmt: skip


def test_verdicts_name_the_fastest_copyless_pipeline_and_why() -> None:
    zc = _row("copyless-ort-zc", 5.0, (4.9, 5.0, 5.2))
    cpu = _row("copyless-ort-cpu", 5.5, (5.4, 5.5, 5.6))
    assert verdicts([zc, cpu]) == [
        "m fp32 b1: fastest copyless pipeline copyless-ort-zc (5.000 ms/frame), zero-copy"
    ]
    close = _row("copyless-ort-cpu", 4.95, (4.8, 4.9, 5.0))
    (line,) = verdicts([zc, close])
    assert "NOT zero-copy" in line and "within noise" in line
    one = [_row("copyless-ort-zc", 5.0, (5.0,)), _row("copyless-ort-cpu", 4.0, (4.0,))]
    (line,) = verdicts(one)
    assert "too few rounds" in line
    ov_zc = _row("copyless-ov-zc", 4.5, (4.4, 4.5, 4.6), engine="ov")
    far = _row("copyless-ort-cpu", 4.0, (3.9, 4.0, 4.1))
    (line,) = verdicts([ov_zc, zc, far])  # compared with ORT's own zero-copy row, not OV's
    assert "25.0% slower beyond the rounds' spread (preprocess +0.000 ms, infer +1.000 ms)" in line


def test_gate_rules() -> None:
    ref = Outcome(classes=(285, 281, 282, 287, 904))
    assert disagreement(ref, ref, "fp32") is None
    assert disagreement(ref, Outcome(classes=(285, 281, 1, 2, 3)), "fp32") is not None
    assert disagreement(ref, Outcome(classes=(285, 281, 1, 2, 3)), "int8") is None
    assert disagreement(ref, Outcome(classes=(281, 285, 282, 287, 904)), "int8") is not None
    boxes = ((0.0, 0.0, 10.0, 5.0), (0.0, 10.0, 10.0, 15.0), (0.0, 20.0, 10.0, 25.0))
    assert disagreement(Outcome(boxes=boxes), Outcome(boxes=boxes[:2]), "fp32") is None
    assert disagreement(Outcome(boxes=boxes), Outcome(), "fp32") is not None
    shifted = tuple((x0 + 8, y0, x1 + 8, y1) for x0, y0, x1, y1 in boxes)
    assert disagreement(Outcome(boxes=boxes), Outcome(boxes=shifted), "fp32") is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "vgg"], "invalid choice"),
        (["--batch", "0"], "--batch"),
        (["--batch", "x"], "--batch"),
        (["--precision", "fp8"], "--precision"),
        (["--only", "copyless-turbo"], "--only"),
        (["--frames", "0"], "--frames"),
        (["--photo", "moon"], "moon"),
        (["--ov-precision", "int4"], "--ov-precision"),
    ],
)
def test_bad_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_the_suites_are_what_ships(capsys: pytest.CaptureFixture[str]) -> None:
    """copyless-bench lists and runs its three suites and nothing of the checkout's
    ``benchmarks/`` (issue 53): those run as ``python benchmarks/NAME.py``."""
    assert cli.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert [line.split()[0] for line in listed.splitlines()] == ["peers", "prefix", "spin"]
    assert "benchmarks" not in listed
    assert cli.main(["layout", "--sizes", "8x8", "--repeats", "1"]) == 2  # a program: not run
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert captured.out == "" and line.startswith("copyless-bench: error: no suite 'layout'")
    assert line.endswith("run it there with python benchmarks/layout.py")
    assert cli.main(["../no-such"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "no suite '../no-such'" in line and "benchmarks/" not in line  # no such file name
    with pytest.raises(SystemExit) as exc:  # a built-in suite's own arguments
        cli.main(["spin", "--model", "ppocr-det"])
    assert exc.value.code == 2


def test_prefix_profiles_the_folded_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["prefix", "--model", "efficientnet-lite0", "--runs", "2", "--engines", "ort"]
    assert cli.main(argv) == 0
    (row,) = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert row[:2] == ["efficientnet-lite0", "ort"]
    rgbx, alone, extra, prefix = (float(v) for v in row[2:6])
    assert rgbx > prefix > 0 and alone > 0 and extra == pytest.approx(rgbx - alone, abs=2e-3)
    assert row[6::2] == ["Pad", "Transpose", "Slice", "Cast"]  # the folded nodes, in order


def test_stopwatch_gives_median_seconds_per_frame_per_stage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from copyless.apps.bench import stages

    clock = iter([0.0, 1.0, 3.0, 10.0, 11.0, 13.0, 20.0, 21.0, 123.0])
    monkeypatch.setattr(stages.time, "perf_counter", lambda: next(clock))
    watch, times = stages.Stopwatch(), StageClock()
    for _ in range(3):  # three batches of 2 frames: decode 1 s, infer 2, 2 and 102 s
        watch.start()
        watch.lap("decode")
        watch.lap("infer")
        watch.frames(2)
    watch.flush(times)
    # one sample per stage, the median over the batches: the preempted batch is an outlier
    assert stages.medians_ms(times) == {"decode": 500.0, "infer": 1000.0}
    watch.flush(times)  # nothing since: no sample
    assert times.snapshot()["decode"].count == 1 and "preprocess" not in times.snapshot()
