"""A reduced-precision model says what it costs: copyless-compile measures int8 against fp32
on the calibration images and prints it; the apps print it whenever they run such a model."""

from __future__ import annotations

from pathlib import Path

import pytest

from copyless.apps import compile as compile_app
from copyless.apps import zerocopy
from copyless.model import load_model, precision_of, zoo
from copyless.types import bf16_available
from model_helpers import calibration_folder


def test_compile_prints_and_zerocopy_repeats_the_int8_price(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    photos = calibration_folder(tmp_path / "calibration")
    out = tmp_path / "lite0_int8.rai"
    argv = [str(zoo.build("efficientnet-lite0", progress=False)), "-o", str(out),
            "--input-format", "rgbx", "--mean", "127,127,127", "--std", "128,128,128",
            "--resize", "crop:0.875", "--colour-order", "rgb",
            "--quantize", "int8", "--calibration", str(photos)]  # fmt: skip
    assert compile_app.main(argv) == 0
    record = precision_of(load_model(out).metadata)
    assert record is not None
    line = f"int8 model: top-1 as fp32 on {record['top1']}% of 20 held-out calibration images"
    assert line in capsys.readouterr().out
    image = str(zoo.photo_path("chelsea.jpg"))
    assert zerocopy.main(["-i", image, "-m", str(out), "-n", "1"]) == 0
    assert line in capsys.readouterr().err
    fp32 = tmp_path / "lite0.rai"
    assert compile_app.main([argv[0], "-o", str(fp32), *argv[3:-4]]) == 0
    capsys.readouterr()
    assert zerocopy.main(["-i", image, "-m", str(fp32), "-n", "1"]) == 0
    assert "int8 model" not in capsys.readouterr().err


def test_compile_prints_and_zerocopy_repeats_the_bf16_price(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--precision bf16: measured on OpenVINO where the CPU has BF16, printed by the compiler
    and by the app on every run; the app runs it on OpenVINO in bf16. Elsewhere: one line."""
    from copyless.model import _bf16

    photos = calibration_folder(tmp_path / "photos", count=_bf16.MIN_IMAGES)
    out = tmp_path / "lite0_bf16.rai"
    argv = [str(zoo.build("efficientnet-lite0", progress=False)), "-o", str(out),
            "--input-format", "rgbx", "--mean", "127,127,127", "--std", "128,128,128",
            "--resize", "crop:0.875", "--colour-order", "rgb",
            "--precision", "bf16", "--calibration", str(photos)]  # fmt: skip
    if not bf16_available():
        assert compile_app.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "has no BF16 arithmetic" in err
        return
    assert compile_app.main(argv) == 0
    record = precision_of(load_model(out).metadata)
    assert record is not None and record["precision"] == "bf16"
    line = (f"bf16 model (OpenVINO): top-1 as fp32 on {record['top1']}% of 20 calibration "
            f"images")  # fmt: skip
    speed = f"{record['speed']['ratio']}x fp32's speed"
    printed = capsys.readouterr().out
    assert line in printed and speed in printed
    image = str(zoo.photo_path("chelsea.jpg"))
    assert zerocopy.main(["-i", image, "-m", str(out), "-n", "1"]) == 0
    err = capsys.readouterr().err
    assert line in err and speed in err
    assert "engine: openvino (bf16 arithmetic runs on OpenVINO only" in err


@pytest.mark.parametrize("has_bf16", [True, False])
def test_compile_offers_bf16_and_never_takes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    has_bf16: bool,
) -> None:  # fmt: skip
    """Where the CPU computes BF16, a plain compile says how to measure it; the model it
    writes stays fp32 (no precision record: the runner runs it in fp32)."""
    monkeypatch.setattr(compile_app, "bf16_available", lambda: has_bf16)
    out = tmp_path / "lite0.rai"
    argv = [str(zoo.build("efficientnet-lite0", progress=False)), "-o", str(out),
            "--input-format", "rgbx", "--mean", "127,127,127", "--std", "128,128,128"]  # fmt: skip
    assert compile_app.main(argv) == 0
    printed = capsys.readouterr()
    assert ("--precision bf16 --calibration DIR measures" in printed.err) is has_bf16
    assert "BF16" not in printed.out  # a note, on stderr: stdout stays the compile's lines
    assert precision_of(load_model(out).metadata) is None


def test_copyless_video_runs_an_int8_model_and_says_what_it_costs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's INT8 model for the decoder's I420 planes (crop and resize in the graph),
    calibrated on photos: every frame labelled as the scene's photo, the price printed."""
    import re

    from copyless.apps import video
    from copyless.model import compile_model, precision_line
    from video_helpers import EXPECTED, make_clip

    clip = make_clip(tmp_path / "clip.mp4", 240, 320, 3)
    model = compile_model(zoo.build("efficientnet-lite0", progress=False), tmp_path / "q.rai",
                          precision="int8", calibration=calibration_folder(tmp_path / "photos"),
                          input_format="i420", input_size=(240, 320), input_crop=0.875,
                          mean=(127,) * 3, std=(128,) * 3)  # fmt: skip
    record = precision_of(load_model(model).metadata)
    assert record is not None and record["precision"] == "int8"
    assert video.main(["-i", str(clip), "-m", str(model)]) == 0
    printed = capsys.readouterr()
    labels = {int(m.group(1)): int(m.group(2))
              for m in re.finditer(r"^frame (\d+): (\d+) ", printed.out, re.M)}  # fmt: skip
    assert sorted(labels) == list(range(6))
    for index, label in labels.items():
        assert label in EXPECTED["chelsea" if index < 3 else "coffee"], (index, label)
    assert precision_line(load_model(model).metadata) in printed.err
