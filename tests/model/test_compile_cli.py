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
                 "pixel units", "--precision int8", "--max-drop", "--validation"):  # fmt: skip
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


def test_precision_int8_flags_reach_the_quantizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """--precision int8 with --validation and --max-drop, on a classifier whose nodes have no
    names (NNCF's layers are named for the record); the precision line on stdout, the
    calibration's warnings one line each."""
    import json

    from copyless.model import precision_of
    from model_helpers import calibration_folder
    from model_helpers import conv_net as classifier

    source = tmp_path / "classifier.onnx"
    onnx.save(classifier(size=24), str(source))
    photos = calibration_folder(tmp_path / "photos", count=20, size=24)
    checks = calibration_folder(tmp_path / "checks", count=7, size=24, seed=5)
    (checks / "readme.txt").write_text("validation crops")
    out = tmp_path / "q.rai"
    code = main([str(source), "-o", str(out), "--precision", "int8", "--calibration",
                 str(photos), "--validation", str(checks), "--max-drop", "100"])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr()
    model = load_model(out)
    record = precision_of(model.metadata)
    assert record is not None and record["precision"] == "int8"
    assert (record["images"], record["images_from"]) == (7, "validation")
    assert record["max_drop"] == 100.0 and record["reverted"] == []
    assert record["calibration"]["images"] == 20  # nothing held out: validation given
    assert f"int8 model: top-1 as fp32 on {record['top1']}% of 7 validation images" in printed.out
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("readme.txt" in line and "skipped" in line for line in warnings)
    assert any("20 usable images; 100 or more are recommended" in line for line in warnings)
    options = json.loads(model.metadata["options"])
    assert (options["precision"], options["quantize"], options["max_drop"]) == ("int8", "int8",
                                                                                100.0)  # fmt: skip
    assert main([str(source), "-o", str(tmp_path / "x.rai"), "--quantize", "int8",
                 "--precision", "bf16", "--calibration", str(photos)]) == 2  # fmt: skip
    assert "not both" in capsys.readouterr().err


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


@pytest.mark.parametrize("name", ["lite0.rai", "lite0"], ids=["rai", "directory"])
def test_missing_directories_are_made_as_compile_model_makes_them(
    model_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """docs/serve.md's layout, ``-o models/lite0/lite0.rai`` in an empty folder (relative, as
    typed): the CLI makes the directories, as the Python ``compile_model`` does."""
    monkeypatch.chdir(tmp_path)
    out = Path("models") / "lite0" / name
    assert main([str(model_file), "-o", str(out)]) == 0
    assert load_model(tmp_path / out).name == "convnet"


def test_an_output_below_a_file_is_refused_before_compiling(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "models").write_text("a file, not a folder")
    assert main([str(model_file), "-o", str(tmp_path / "models" / "lite0" / "x.rai")]) == 2
    assert "is not a directory" in capsys.readouterr().err
