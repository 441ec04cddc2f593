"""The runner's precision policy on the real EfficientNet-Lite0: the default runs the model's
own precision (OpenVINO compiled with INFERENCE_PRECISION_HINT f32, never its automatic bf16),
a model compiled for BF16 runs in BF16 on OpenVINO only, and BF16 is refused in one line
where the engine or the CPU lacks it (a CPU without BF16 simulated through OpenVINO's
capability list)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import copyless as cl
from copyless.backends import _openvino
from copyless.model import CompiledModel, compile_to_memory, zoo
from copyless.model import _bf16 as bf16
from copyless.runner import Runner, RunnerFactory
from copyless.types import bf16_available
from model_helpers import calibration_folder

pytest.importorskip("openvino")
OV, ORT, VAIML = cl.RunnerType.OPENVINO, cl.RunnerType.ONNXRUNTIME, cl.RunnerType.VAIML
HAS_BF16 = bf16_available()
VIEW = {"input_format": "rgbx", "mean": (127, 127, 127), "std": (128, 128, 128),
        "resize": "crop:0.875"}  # fmt: skip
NO_BF16 = ("FP32", "INT8", "BIN", "EXPORT_IMPORT")


@pytest.fixture(scope="module")
def effnet() -> Path:
    return zoo.build("efficientnet-lite0", progress=False)


@pytest.fixture(scope="module")
def fp32(effnet: Path) -> CompiledModel:
    return compile_to_memory(effnet, **VIEW)


@pytest.fixture(scope="module")
def recorded_bf16(fp32: CompiledModel) -> CompiledModel:
    """The fp32 model with a BF16 record, as one compiled on another machine (no measuring)."""
    record = {"precision": "bf16", "reference": "fp32", "engine": "openvino", "images": 20,
              "images_from": "calibration", "top1": 95.0}  # fmt: skip
    return dataclasses.replace(fp32, metadata={**fp32.metadata, "precision": json.dumps(record)})


def _hint(runner: Runner) -> str:
    engine = runner._engines.loaded[0]  # the OpenVINO engine
    return str(engine.compiled_model.get_property("INFERENCE_PRECISION_HINT").to_string())


@pytest.mark.parametrize("options", [None, {"inference_precision": "model"}])
def test_the_default_runs_the_models_own_precision(fp32, options, runners, tmp_path) -> None:
    """Fails if OpenVINO's automatic bf16 (AVX512_BF16/AMX CPUs) slips in."""
    runners.append(RunnerFactory.from_compiled(fp32, options, OV))
    assert _hint(runners[-1]) == "f32"
    chosen = RunnerFactory.from_compiled(fp32, {**(options or {}), "device": "CPU",
                                                "cache_path": str(tmp_path)}, VAIML)  # fmt: skip
    runners.append(chosen)
    assert chosen.engine is OV and _hint(chosen) == "f32"


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no BF16 arithmetic")
def test_a_model_compiled_for_bf16_runs_in_bf16_on_openvino(effnet, tmp_path, runners) -> None:
    photos = calibration_folder(tmp_path / "photos", count=bf16.MIN_IMAGES)
    model = compile_to_memory(effnet, precision="bf16", calibration=photos, **VIEW)
    runners.append(RunnerFactory.from_compiled(model, None, OV))
    assert _hint(runners[-1]) == "bf16"
    chosen = RunnerFactory.from_compiled(model, {"cache_path": str(tmp_path)}, VAIML)
    runners.append(chosen)
    assert chosen.engine is OV and _hint(chosen) == "bf16"
    assert "bf16 arithmetic runs on OpenVINO only" in chosen.engine_reason
    runners.append(RunnerFactory.from_compiled(model, {"inference_precision": "f32"}, OV))
    assert _hint(runners[-1]) == "f32"  # asked for fp32 by name: fp32


def test_onnxruntime_refuses_bf16_in_one_line(recorded_bf16, fp32, runners) -> None:
    for model, options in ((recorded_bf16, None), (fp32, {"inference_precision": "bf16"})):
        with pytest.raises(cl.UnsupportedError) as caught:
            RunnerFactory.from_compiled(model, options, ORT)
        message = str(caught.value)
        assert "\n" not in message and "BF16 runs on OpenVINO only" in message
    assert "compiled to run in bf16" in _refusal(recorded_bf16, None, ORT)
    runners.append(RunnerFactory.from_compiled(recorded_bf16, {"inference_precision": "f32"}, ORT))


def test_a_cpu_without_bf16_is_refused_in_one_line(
    recorded_bf16, fp32, runners, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_openvino, "cpu_capabilities", lambda _core: NO_BF16)
    for model, options in ((recorded_bf16, None), (fp32, {"inference_precision": "bf16"})):
        message = _refusal(model, options, OV)
        assert "\n" not in message and "has no BF16 arithmetic" in message
        assert ", ".join(NO_BF16) in message
    runners.append(RunnerFactory.from_compiled(recorded_bf16, {"inference_precision": "f32"}, OV))
    assert _hint(runners[-1]) == "f32"
    runners.append(RunnerFactory.from_compiled(fp32, None, OV))  # fp32 models are unaffected
    assert _hint(runners[-1]) == "f32"


def _refusal(model: CompiledModel, options: dict[str, str] | None, engine: cl.RunnerType) -> str:
    with pytest.raises(cl.UnsupportedError) as caught:
        RunnerFactory.from_compiled(model, options, engine)
    return str(caught.value)
