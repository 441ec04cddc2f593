"""BF16 at a stated price: precision="bf16" measures OpenVINO's BF16 arithmetic against fp32 on
the calibration images (real EfficientNet-Lite0, real photo crops) and records the price in
the model; a CPU without BF16 arithmetic is refused in one line (simulated through
OpenVINO's capability list). precision="fastest": test_fastest.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from copyless.model import (
    CompiledModel,
    compile_to_memory,
    precision_line,
    precision_of,
    run_precision,
    zoo,
)
from copyless.model import _bf16 as bf16
from copyless.types import DataType, OptionError, UnsupportedError, bf16_available
from model_helpers import calibration_folder

pytest.importorskip("openvino")
HAS_BF16 = bf16_available()
needs_bf16 = pytest.mark.skipif(not HAS_BF16, reason="this CPU has no BF16 arithmetic")
VIEW = {"input_format": "rgbx", "mean": (127, 127, 127), "std": (128, 128, 128),
        "resize": "crop:0.875"}  # fmt: skip


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 varied colour crops: the count recommended for an agreement figure."""
    return calibration_folder(tmp_path_factory.mktemp("photos"), count=bf16.MIN_IMAGES)


@pytest.fixture(scope="module")
def effnet() -> Path:
    return zoo.build("efficientnet-lite0", progress=False)


@pytest.fixture(scope="module")
def effnet_bf16(effnet: Path, photos: Path) -> CompiledModel:
    if not HAS_BF16:
        pytest.skip("this CPU has no BF16 arithmetic")
    return compile_to_memory(effnet, precision="bf16", calibration=photos, **VIEW)


@needs_bf16
def test_bf16_records_its_agreement_and_speed(effnet_bf16: CompiledModel) -> None:
    record = precision_of(effnet_bf16.metadata)
    assert record is not None
    assert record["precision"] == "bf16" and record["engine"] == "openvino"
    assert record["images"] == bf16.MIN_IMAGES and record["images_from"] == "calibration"
    assert 50.0 <= record["top1"] <= 100.0  # BF16 keeps most answers; the figure is real
    assert 0 < record["sure_images"] <= record["images"]
    assert 0.0 <= record["top1_sure"] <= 100.0
    speed = record["speed"]
    assert speed["fp32_ms"] > 0 and speed["bf16_ms"] > 0
    assert speed["ratio"] == pytest.approx(speed["fp32_ms"] / speed["bf16_ms"], abs=0.01)
    line = precision_line(effnet_bf16.metadata)
    assert line is not None and line.startswith(
        f"bf16 model (OpenVINO): top-1 as fp32 on {record['top1']}% of 20 calibration images"
    )
    assert f"{speed['ratio']}x fp32's speed" in line
    assert run_precision(effnet_bf16.metadata) == "bf16"


@needs_bf16
def test_bf16_keeps_the_tensors_float32(effnet_bf16: CompiledModel, effnet: Path) -> None:
    """BF16 is how OpenVINO computes, not what the tensors hold: the views are fp32's."""
    fp32 = compile_to_memory(effnet, **VIEW)
    assert [s.hw for s in effnet_bf16.inputs] == [s.hw for s in fp32.inputs]
    assert [s.hw.data_type for s in effnet_bf16.outputs] == [DataType.FLOAT32]
    assert run_precision(fp32.metadata) == "f32" and precision_of(fp32.metadata) is None
    assert json.loads(effnet_bf16.metadata["options"])["precision"] == "bf16"


@needs_bf16
def test_min_agreement_refuses_naming_the_figure(effnet: Path, photos: Path) -> None:
    with pytest.raises(UnsupportedError, match=r"bf16 model refused: top-1 agrees with fp32 on"):
        compile_to_memory(effnet, precision="bf16", calibration=photos, min_agreement=100.0,
                          **{**VIEW, "mean": (0, 0, 0), "std": (1, 1, 1)})  # fmt: skip


def test_a_cpu_without_bf16_is_refused_in_one_line(
    effnet: Path, photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bf16, "cpu_capabilities", lambda _core=None: ("FP32", "INT8", "BIN"))
    with pytest.raises(UnsupportedError) as caught:
        compile_to_memory(effnet, precision="bf16", calibration=photos, **VIEW)
    message = str(caught.value)
    assert "\n" not in message
    assert "has no BF16 arithmetic" in message and "FP32, INT8, BIN" in message


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"precision": "bf16"}, "needs calibration="),
        ({"precision": "fp64", "calibration": "."}, "precision must be one of"),
        ({"precision": "bf16", "quantize": "int8", "calibration": "."}, "not both"),
        ({"min_agreement": 99.0}, "min_agreement needs precision="),
    ],
)
def test_bad_precision_options(options: dict[str, object], match: str, photos: Path) -> None:
    if options.get("calibration") == ".":
        options = {**options, "calibration": photos}
    with pytest.raises(OptionError, match=match):
        compile_to_memory(zoo.build("efficientnet-lite0", progress=False), **options)


@needs_bf16
def test_few_images_are_measured_with_a_warning(
    effnet: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    few = calibration_folder(tmp_path / "few", count=5)
    model = compile_to_memory(effnet, precision="bf16", calibration=few, **VIEW)
    record = precision_of(model.metadata)
    assert record is not None and record["images"] == 5
    assert "calibration: 5 usable images; 20 or more are recommended (the agreement is " \
           "measured on them)" in caplog.messages
