"""``copyless-compile``: flags reach the compiler, outputs load, errors give exit codes."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from compiler_support import conv_net

from copyless.apps.compile import main
from copyless.model import load_model, task_of
from copyless.types import DataType, MemoryLayout


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "convnet.onnx"
    onnx.save(conv_net(), str(path))
    return path


def test_compile_to_rai_with_flags(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "net.rai"
    code = main([str(model_file), "-o", str(out), "--batch-size", "2", "--input-format", "rgbx",
                 "--mean", "127,127,127", "--std", "128,128,128", "--output-dtype", "features=fp16",
                 "--output-layout", "features=NHWC", "--cpu-ops", "Softmax"])  # fmt: skip
    assert code == 0
    assert "compiled" in capsys.readouterr().out
    model = load_model(out)
    assert model.name == "convnet" and model.batch_size == 2
    assert model.inputs[0].hw.memory_layout is MemoryLayout.NHWC4
    assert model.outputs[0].hw.data_type is DataType.FP16
    assert model.outputs[0].hw.memory_layout is MemoryLayout.NHWC
    assert model.outputs[1].hw.data_type is DataType.FLOAT32
    assert [p.target for p in model.partitions] == ["npu", "cpu"]


def test_compile_to_directory_default(model_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "net"
    assert (
        main([str(model_file), "-o", str(out), "--input-layout", "HCWNC4", "--input-dtype", "bf16"])
        == 0
    )
    assert (out / "vaiml_par_0" / "par_0.onnx").is_file()
    spec = load_model(out).inputs[0]
    assert spec.hw.shape == (16, 1, 16, 1, 4) and spec.hw.data_type is DataType.BF16


def test_errors_give_exit_codes(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "x.rai")]) == 2
    assert "no model at" in capsys.readouterr().err
    (tmp_path / "noise.onnx").write_bytes(b"\x01not a protobuf")
    assert main([str(tmp_path / "noise.onnx"), "-o", str(tmp_path / "x.rai")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main([str(model_file), "-o", str(tmp_path / "x.rai"), "--cpu-ops", "TopK"]) == 2
    assert "no node of those types" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([str(model_file), "-o", str(tmp_path / "x.rai"), "--mean", "a,b,c"])
    assert exc.value.code == 2


def test_help_documents_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for flag in ("--input-format", "--quantize", "--quantize-ops", "--calibration",
                 "--input-layout", "--batch-size", "--cpu-ops", "--cpu-tail", "--input-shape",
                 "pixel units"):  # fmt: skip
        assert flag in text


def test_quantize_ops_flag_reaches_the_quantizer(model_file: Path, tmp_path: Path) -> None:
    import json

    from model_helpers import calibration_folder

    photos = calibration_folder(tmp_path / "photos", size=24)
    out = tmp_path / "q.rai"
    code = main([str(model_file), "-o", str(out), "--quantize", "int8", "--calibration",
                 str(photos), "--quantize-ops", "Conv,Gemm"])  # fmt: skip
    assert code == 0
    assert json.loads(load_model(out).metadata["options"])["quantize_ops"] == ["Conv", "Gemm"]


def test_compile_postprocess_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from copyless.model import zoo

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(zoo.CACHE_ENV, str(tmp_path / "cache"))
        source = zoo.build("centerface", progress=False)
    out = tmp_path / "faces.rai"
    code = main([str(source), "-o", str(out), "--input-shape", "input=1x3x64x96",
                 "--input-format", "rgbx", "--input-size", "60x90", "--postprocess", "centerface",
                 "--score-threshold", "0.7", "--iou-threshold", "0.4",
                 "--max-detections", "5"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    model = load_model(out)
    assert model.inputs[0].hw.shape == (1, 60, 90, 4)
    assert [(o.name, o.hw.shape) for o in model.outputs] == [
        ("boxes", (5, 4)), ("scores", (5,)), ("classes", (5,)), ("landmarks", (5, 10)),
    ]  # fmt: skip
    assert task_of(model).labels == ("face",) and task_of(model).head == "centerface"
    assert '"score_threshold": 0.7' in model.metadata["options"]
    bad = main([str(source), "-o", str(tmp_path / "x.rai"), "--input-shape", "input=1x3x64x96",
                "--iou-threshold", "0.4"])  # fmt: skip
    assert bad == 2 and "postprocess" in capsys.readouterr().err
