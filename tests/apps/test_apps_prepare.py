"""The apps prepare photos from the compiled model's record (apps/_prepare.py), and say so
when the record is missing."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import copyless as cl
from copyless.apps import zerocopy
from copyless.model import compile_model, zoo
from copyless.runner import RunnerFactory
from copyless.vision import preparer_for

CAT_CLASSES = {281, 282, 285}
LITE0 = {"mean": (127.0,) * 3, "std": (128.0,) * 3}


@pytest.fixture(scope="module")
def lite0_variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """EfficientNet-Lite0 compiled three ways: no record, host normalisation, recorded BGR."""
    root = tmp_path_factory.mktemp("lite0")
    source = zoo.build("efficientnet-lite0", progress=False)
    return {
        "bare": compile_model(source, root / "bare.rai", input_format="rgbx"),
        "host": compile_model(
            source, root / "host.rai", resize="crop", colour_order="rgb", **LITE0
        ),
        "bgr": compile_model(
            source, root / "bgr.rai", input_format="rgbx", resize="crop", colour_order="bgr",
            **LITE0,
        ),
    }


def _top1(out: str) -> int:
    match = re.search(r"^top-1: (\d+) ", out, re.M)
    assert match, out
    return int(match.group(1))


def test_a_model_without_its_preprocessing_gets_a_clear_warning(
    lite0_variants: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    photo = str(zoo.photo_path("chelsea.jpg"))
    assert zerocopy.main(["-i", photo, "-m", str(lite0_variants["bare"])]) == 0
    err = capsys.readouterr().err
    assert "without its preprocessing (mean/std, colour order, resize policy)" in err
    assert "--mean R,G,B --std R,G,B" in err
    assert zerocopy.main(["-i", photo]) == 0  # the built-in model records everything
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("view", [[], ["-c"]], ids=["zero-copy", "cpu-view"])
def test_host_normalisation_from_the_record_gives_the_right_label(
    lite0_variants: dict[str, Path], capsys: pytest.CaptureFixture[str], view: list[str]
) -> None:
    """No input_format: the input is the model's normalised float tensor; only the record's
    mean/std make the label right (raw pixels give another one)."""
    photo = str(zoo.photo_path("chelsea.jpg"))
    assert zerocopy.main(["-i", photo, "-m", str(lite0_variants["host"]), *view]) == 0
    out = capsys.readouterr()
    assert _top1(out.out) in CAT_CLASSES
    assert "colour" not in out.err and "warning" not in out.err


def test_recorded_bgr_writes_blue_first(lite0_variants: dict[str, Path]) -> None:
    image = np.zeros((64, 64, 3), np.uint8)
    image[..., 0], image[..., 2] = 200, 10  # red photo
    for name, first in (("bgr", 10), ("host", 200)):
        with RunnerFactory.create_runner(lite0_variants[name]) as runner:
            view = cl.TensorType.HW if name == "bgr" else cl.TensorType.CPU
            (info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, view)
            tensor = runner.allocate_npu_tensor(info)
            prepare = preparer_for(runner, info)
            prepare(image, tensor)
            frame = tensor.numpy()[0]
            channel0 = frame[..., 0] if name == "bgr" else frame[0]
            if name == "host":  # normalised in place: (200 - 127) / 128
                first = (first - 127) / 128
            np.testing.assert_allclose(channel0, first, atol=1e-5)


def test_large_photos_decode_at_a_reduced_scale_with_the_same_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Image.open(zoo.photo_path("chelsea")) as photo:
        big = photo.convert("RGB").resize((451 * 4, 300 * 4), Image.Resampling.BICUBIC)
    path = tmp_path / "big.jpg"
    buffer = io.BytesIO()
    big.save(buffer, format="JPEG", quality=92)
    path.write_bytes(buffer.getvalue())
    from copyless.apps._models import builtin_classifier

    with RunnerFactory.create_runner(builtin_classifier(progress=False)) as runner:
        (info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        prepare = preparer_for(runner, info)
    assert prepare.min_decode_size() == (512, 512)  # 256 x DECODE_HEADROOM
    assert prepare.decode(path).shape == (600, 902, 3)  # 1/2 of 1200x1804; 1/4 is < 512
    assert zerocopy.main(["-i", str(path), "-n", "2"]) == 0
    assert _top1(capsys.readouterr().out) in CAT_CLASSES


def test_zerocopy_runs_the_text_detector(capsys: pytest.CaptureFixture[str]) -> None:
    assert zerocopy.main(["-i", str(zoo.photo_path("page")), "--model", "ppocr-det"]) == 0
    out = capsys.readouterr().out
    count = int(re.search(r"^text boxes: (\d+)$", out, re.M).group(1))  # type: ignore[union-attr]
    assert count >= 5
    assert re.search(r"^total {19}\d+\.\d{3} ms / frame$", out, re.M)


def test_zerocopy_says_the_random_weight_model_has_no_meaningful_labels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert zerocopy.main(["-i", str(zoo.photo_path("chelsea.jpg")), "--model", "resnet50",
                          "-n", "1"]) == 0  # fmt: skip
    captured = capsys.readouterr()
    assert "random weights" in captured.err and "labels mean nothing" in captured.err
    assert re.search(r"^top-1: \d+ ", captured.out, re.M)
    assert zerocopy.main(["-i", str(zoo.photo_path("chelsea.jpg")), "-n", "1"]) == 0
    assert "random weights" not in capsys.readouterr().err
