"""Users' own models through the apps, by the task their record names: copyless-detect
draws and prints a torchvision detector's boxes and a segmenter's classes; copyless-zerocopy
classifies with a model compiled with --mean/--std and no other flag, without warning about
preprocessing it has; a model no app recognises is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from copyless.apps import compile as compile_app
from copyless.apps import detect, zerocopy
from copyless.model import compile_model
from model_helpers import conv_net
from user_models import export, photos

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

IMAGENET = ("--mean", "123.675,116.28,103.53", "--std", "58.395,57.12,57.375")


@pytest.fixture(scope="module")
def photo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("photos") / "chelsea.jpg"
    Image.fromarray(photos()["chelsea"]).save(path)
    return path


def _compiled(name: str, folder: Path, *flags: str) -> Path:
    out = folder / f"{name}.rai"
    assert compile_app.main([str(export(name)), "-o", str(out), "--input-format", "rgbx",
                             *flags, "--quiet"]) == 0  # fmt: skip
    return out


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()
            if line.startswith("{")]


@pytest.mark.parametrize("name", ["ssdlite320_mobilenet_v3_large",
                                  "fasterrcnn_mobilenet_v3_large_320_fpn"])
def test_detect_draws_and_prints_a_torchvision_detectors_boxes(
    name: str, photo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _compiled(name, tmp_path, "--mean", "0,0,0", "--std", "255,255,255")
    drawn = tmp_path / "boxes.png"
    assert detect.main(["-i", str(photo), "-m", str(model), "-o", str(drawn), "--json"]) == 0
    rows = _lines(capsys)
    found = [r for r in rows if r["type"] == "detection"]
    assert found and rows[-1]["detections"] == len(found)
    with Image.open(photo) as image:
        width, height = image.size
    for det in found:  # in the photo's pixels (the 320x320 input stretched back)
        assert 0 <= det["x0"] <= det["x1"] <= width and 0 <= det["y0"] <= det["y1"] <= height
    with Image.open(drawn) as image:
        assert image.size == (width, height)
    err = capsys.readouterr().err
    assert "compiled without its preprocessing" not in err


@pytest.mark.parametrize("name", ["lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large"])
def test_detect_paints_and_counts_a_segmenters_classes(
    name: str, photo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _compiled(name, tmp_path, *IMAGENET)
    painted = tmp_path / "mask.png"
    assert detect.main(["-i", str(photo), "-m", str(model), "-o", str(painted), "--json"]) == 0
    rows = _lines(capsys)
    classes = [r for r in rows if r["type"] == "class"]
    assert classes and abs(sum(float(c["fraction"]) for c in classes) - 1.0) < 1e-3
    assert all(0 <= int(c["class_id"]) < 21 for c in classes)
    with Image.open(photo) as original, Image.open(painted) as drawn:
        assert drawn.size == original.size and drawn.mode == "RGB"
        assert not np.array_equal(np.asarray(drawn), np.asarray(original.convert("RGB")))


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "vit_b_16"])
def test_zerocopy_classifies_without_a_preprocessing_warning(
    name: str, photo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Compiled with --mean/--std only: the record carries the classifier's usual RGB and
    crop, so nothing is missing (the issue's resnet18-rgbx.rai warned it was)."""
    model = _compiled(name, tmp_path, *IMAGENET)
    assert zerocopy.main(["-i", str(photo), "-m", str(model), "-k", "3"]) == 0
    captured = capsys.readouterr()
    assert "compiled without" not in captured.err
    assert [line for line in captured.out.splitlines() if line.startswith("top-")][:3]


def test_a_model_no_task_fits_is_refused_in_one_line(
    photo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = compile_model(conv_net(), tmp_path / "conv.rai")
    assert detect.main(["-i", str(photo), "-m", str(model)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a classifier" in err[0]
