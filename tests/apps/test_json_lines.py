"""``--json`` and ``--quiet`` of every app, on real models and photos: every stdout line is
one JSON object with a ``type``, the last one the ``summary`` (its ``timings`` gone with
``--quiet``); no human line is left; copyless-detect runs without ``-o``. The apps' own
tests check their human lines; here, that ``--quiet`` drops the timing block from them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from copyless.apps import compile as compile_app
from copyless.apps import detect, infer_async, ocr, video, zerocopy, zoo
from copyless.model import zoo as model_zoo

BLOCK_PREFIXES = ("preprocess ", "infer ", "postprocess ", "total ", "throughput ")


def json_lines(out: str) -> list[dict[str, Any]]:
    """Every line of ``out`` as a JSON object (fails on any other line); the last is the
    summary and no other line is."""
    records = [json.loads(line) for line in out.splitlines()]
    assert records, "no output"
    assert all(isinstance(r, dict) and isinstance(r.get("type"), str) for r in records)
    assert records[-1]["type"] == "summary"
    assert all(r["type"] != "summary" for r in records[:-1])
    return records


def _kinds(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == kind]


def _run(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 0) -> str:
    assert main(argv) == code
    return capsys.readouterr().out


def test_zerocopy(capsys: pytest.CaptureFixture[str]) -> None:
    photo = str(model_zoo.photo_path("chelsea.jpg"))
    records = json_lines(_run(zerocopy.main, ["-i", photo, "-n", "2", "--json"], capsys))
    labels = _kinds(records, "label")
    assert [r["rank"] for r in labels] == [1, 2, 3, 4, 5]
    assert labels[0]["class_id"] in {281, 282, 285} and 0 < labels[0]["score"] <= 1
    assert set(labels[0]) == {"type", "rank", "class_id", "label", "score"}
    summary = records[-1]
    assert summary["labels"] == 5 and summary["timings"]["rounds"] == 2
    assert set(summary["timings"]) >= {"preprocess_ms", "infer_ms", "postprocess_ms",
                                       "total_ms", "throughput_infer_fps"}  # fmt: skip
    quiet = json_lines(_run(zerocopy.main, ["-i", photo, "--json", "--quiet"], capsys))
    assert "timings" not in quiet[-1] and len(_kinds(quiet, "label")) == 5
    human = _run(zerocopy.main, ["-i", photo, "--quiet"], capsys).splitlines()
    assert human[0].startswith("top-1: ") and len(human) == 5  # the labels, no block
    assert not [line for line in human if line.startswith(BLOCK_PREFIXES)]


def test_zerocopy_text_boxes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from copyless.ocr import draw_page

    page = tmp_path / "page.png"
    Image.fromarray(draw_page(0, size=(640, 480), lines=4).image).save(page)
    records = json_lines(_run(zerocopy.main, ["-i", str(page), "-m", "ppocr-det", "--json"],
                              capsys))  # fmt: skip
    boxes = _kinds(records, "box")
    assert boxes and records[-1]["boxes"] == len(boxes)
    assert set(boxes[0]) == {"type", "x0", "y0", "x1", "y1", "score"}


def test_detect_without_output(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    photo = str(model_zoo.photo_path("astronaut.jpg"))
    records = json_lines(_run(detect.main, ["-i", photo, "-m", "centerface", "--json"], capsys))
    found = _kinds(records, "detection")
    assert found, records  # the astronaut's face
    assert set(found[0]) == {"type", "x0", "y0", "x1", "y1", "score", "class_id", "label"}
    assert records[-1]["detections"] == len(found) and records[-1]["output"] is None
    assert "infer_ms" in records[-1]["timings"]
    assert not list(tmp_path.iterdir())
    human = _run(detect.main, ["-i", photo, "-m", "face", "--quiet"], capsys).splitlines()
    assert human[0] == f"detections: {len(found)}" and len(human) == 1 + len(found)
    quiet = json_lines(_run(detect.main, ["-i", photo, "-m", "face", "--json", "--quiet"],
                            capsys))  # fmt: skip
    assert "timings" not in quiet[-1]


def test_infer_async(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)  # the output_f*.bin files
    model = "efficientnet-lite0"  # a copyless-zoo name, as every app's -m takes
    records = json_lines(_run(infer_async.main, ["-m", model, "--dry-run", "-n", "3", "--json"],
                              capsys))  # fmt: skip
    assert [r["job"] for r in _kinds(records, "job")] == [0, 1, 2]
    assert records[-1]["completed"] == 3 and "timings" not in records[-1]
    bench = ["-m", model, "--dry-run", "-n", "2", "--rounds", "1", "--benchmark", "--json"]
    summary = json_lines(_run(infer_async.main, bench, capsys))[-1]
    assert set(summary["timings"]) == {"async_ms", "async_ms_per_frame", "sync_ms",
                                       "sync_ms_per_frame"}  # fmt: skip
    quiet = _run(infer_async.main, [*bench[:-1], "--quiet"], capsys).splitlines()
    assert quiet == ["Batches completed: 2 / 2"]


def test_video(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from video_helpers import make_clip

    clip = str(make_clip(tmp_path / "clip.mp4", 120, 160, 2))
    records = json_lines(_run(video.main, ["-i", clip, "--json"], capsys))
    frames = _kinds(records, "frame")
    assert [f["frame"] for f in frames] == [0, 1, 2, 3]
    assert set(frames[0]) == {"type", "stream", "frame", "class_id", "label", "score"}
    (stream,) = _kinds(records, "stream")
    assert stream["frames"] == 4 and "fps" in stream
    assert records[-1]["frames"] == 4 and "infer_ms" in records[-1]["timings"]
    quiet = json_lines(_run(video.main, ["-i", clip, "--json", "--quiet"], capsys))
    assert "timings" not in quiet[-1] and "fps" not in _kinds(quiet, "stream")[0]
    human = _run(video.main, ["-i", clip, "--quiet"], capsys).splitlines()
    assert len([line for line in human if line.startswith("frame ")]) == 4
    assert not [line for line in human if "ms / frame" in line or line.endswith(" FPS")]


def test_ocr(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from copyless.ocr import draw_page

    page = tmp_path / "page.png"
    drawn = draw_page(1, size=(700, 500), lines=4)
    Image.fromarray(drawn.image).save(page)
    doc = tmp_path / "lines.json"
    argv = ["-i", str(page), "--json", "--json-file", str(doc)]
    records = json_lines(_run(ocr.main, argv, capsys))
    (image,) = _kinds(records, "image")
    assert image["image"] == str(page) and image["error"] is None
    assert len(image["lines"]) == len(drawn.lines)
    assert set(image["lines"][0]) == {"box", "quad", "text", "score"}
    assert set(image["ms_per_image"]) == {"decode", "detect", "crops", "recognise", "total"}
    assert records[-1]["images"] == 1 and "seconds" in records[-1]["timings"]
    assert json.loads(doc.read_text())["images"][0]["lines"] == image["lines"]
    quiet = json_lines(_run(ocr.main, ["-i", str(page), "--json", "--quiet"], capsys))
    assert "timings" not in quiet[-1] and "ms_per_image" not in quiet[0]
    human = _run(ocr.main, ["-i", str(page), "--quiet"], capsys)
    assert "ms / image" not in human and human.startswith(f"image: {page}")


def test_compile_and_zoo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    listed = json_lines(_run(zoo.main, ["--list", "--json"], capsys))
    names = [r["name"] for r in _kinds(listed, "model")]
    assert names == model_zoo.names() and listed[-1]["models"] == len(names)
    built = json_lines(_run(zoo.main, ["efficientnet-lite0", "--json"], capsys))
    (model,) = _kinds(built, "model")
    assert Path(model["path"]).is_file() and "seconds" in built[-1]["timings"]
    out = tmp_path / "lite0.rai"
    compiled = json_lines(_run(compile_app.main, ["efficientnet-lite0", "-o", str(out),
                                                  "--json"], capsys))  # fmt: skip
    (record,) = _kinds(compiled, "compiled")
    assert record["output"] == str(out) and out.is_file()
    assert "seconds" in compiled[-1]["timings"]
    quiet = _run(compile_app.main, [model["path"], "-o", str(out), "--quiet"], capsys)
    assert quiet.strip() == f"compiled {model['path']} -> {out}"


def test_bench(capsys: pytest.CaptureFixture[str]) -> None:
    from copyless.apps.bench import main

    records = json_lines(_run(main, ["--list", "--json"], capsys))
    assert [r["name"] for r in _kinds(records, "suite")] == ["peers", "prefix", "spin"]
    assert records[-1] == {"type": "summary", "suites": 3}
    spin = json_lines(_run(main, ["spin", "--frames", "1", "--rounds", "1", "--json"], capsys))
    assert [r["variant"] for r in _kinds(spin, "variant")] == [
        "runner", "runner-spinning", "ort-defaults"
    ]  # fmt: skip
    argv = ["prefix", "--model", "efficientnet-lite0", "--runs", "1", "--engines", "ort", "--json"]
    (graph,) = _kinds(json_lines(_run(main, argv, capsys)), "graph")
    assert graph["model"] == "efficientnet-lite0" and graph["rgbx_ms"] > 0


def test_batch(ray_head: Any, photo_folder: Any, tmp_path: Path) -> None:
    """copyless-batch without -o: a row per image on stdout (JSON with --json)."""
    from ray_helpers import RAY_ENV

    folder, expected = photo_folder
    exe = Path(sys.executable).with_name("copyless-batch")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "copyless.apps.batch"]
    env = {**os.environ, **RAY_ENV}
    done = subprocess.run([*command, str(folder), "--address", ray_head.address, "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = json_lines(done.stdout)
    rows = _kinds(records, "image")
    assert sorted(r["path"] for r in rows) == sorted(expected)
    for row in rows:
        assert row["error"] is None and row["class_id"] in expected[row["path"]], row
    assert records[-1]["images"] == len(expected) and records[-1]["output"] is None
    assert "images_per_second" in records[-1]["timings"]
    assert not list(tmp_path.iterdir())  # nothing written
