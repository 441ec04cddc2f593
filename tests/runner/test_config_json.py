"""``config_json``: one file for compiling (``copyless-compile --config-json``) and running (the
runner option): runner options from its "runner" section, and its "compiler" section checked
against what the model was compiled with."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

import copyless as cl
from copyless.apps import compile as compile_app
from copyless.model import CompiledModel, load_model

RUNNER = cl.RunnerType.ONNXRUNTIME
RGBX = {"input_format": "rgbx", "mean": [127, 127, 127], "std": [128, 128, 128]}


def _config(path: Path, **sections: object) -> Path:
    path.write_text(json.dumps(sections))
    return path


@pytest.fixture
def compiled_with_config(tiny: tuple[onnx.ModelProto, CompiledModel], tmp_path: Path):
    source = tmp_path / "net.onnx"
    onnx.save(tiny[0], source)
    config = _config(tmp_path / "vitis_ai_config.json", compiler=RGBX,
                     runner={"max_concurrent_runs": 3})  # fmt: skip
    out = tmp_path / "net.rai"
    assert compile_app.main([str(source), "-o", str(out), "--config-json", str(config)]) == 0
    return source, out, config


def test_one_file_compiles_and_configures_the_runner(compiled_with_config) -> None:
    _source, model, config = compiled_with_config
    (spec,) = load_model(model).inputs
    assert spec.hw.data_type is cl.DataType.UINT8 and spec.hw.memory_layout is cl.MemoryLayout.NHWC4
    options = {"config_json": str(config), "callback_order": "completion"}
    with cl.RunnerFactory.create_runner(model, options) as runner:
        assert runner.get_property("max_concurrent_runs") == 3  # from the "runner" section
        assert runner.get_property("callback_order") == "completion"  # given directly


def test_a_model_compiled_otherwise_is_refused(compiled_with_config, tmp_path: Path) -> None:
    source, model, _config_file = compiled_with_config
    other = _config(tmp_path / "other.json", compiler={**RGBX, "mean": [0, 0, 0]})
    with pytest.raises(cl.OptionError, match=r"mean=\[0, 0, 0\].*compiled with mean="):
        cl.RunnerFactory.create_runner(model, {"config_json": str(other)})
    plain = tmp_path / "plain.rai"
    assert compile_app.main([str(source), "-o", str(plain)]) == 0
    same = _config(tmp_path / "same.json", compiler=RGBX)
    with pytest.raises(cl.OptionError, match=r"input_format='rgbx'.*with input_format=None"):
        cl.RunnerFactory.create_runner(plain, {"config_json": str(same)})
    defaults = _config(tmp_path / "defaults.json", compiler={"batch_size": 1, "cpu_tail": False})
    cl.RunnerFactory.create_runner(plain, {"config_json": str(defaults)}).close()


def test_command_line_flags_win_over_the_file(compiled_with_config, tmp_path: Path) -> None:
    source, _model, config = compiled_with_config
    out = tmp_path / "flags.rai"
    argv = [str(source), "-o", str(out), "--config-json", str(config), "--mean", "1,2,3"]
    assert compile_app.main(argv) == 0
    assert json.loads(load_model(out).metadata["options"])["mean"] == [1.0, 2.0, 3.0]
    with pytest.raises(cl.OptionError, match="mean"):  # the file's mean is not this model's
        cl.RunnerFactory.create_runner(out, {"config_json": str(config)})


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ({"compiler": {"no_such_option": 1}}, "unknown compiler option"),
        ({"compiler": [], "runner": {}}, "section 'compiler' is not an object"),
        ({"runner": {"no_such_option": 1}}, "no_such_option"),
        ({"compiler": {"input_size": "64x64"}}, "input_size needs an input_format"),
        ([1, 2], "does not hold a JSON object"),
    ],
)
def test_bad_files_are_option_errors(compiled_with_config, tmp_path: Path, content, needle) -> None:
    _source, model, _config_file = compiled_with_config
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(content))
    with pytest.raises(cl.OptionError, match=needle):
        cl.RunnerFactory.create_runner(model, {"config_json": str(bad)})
    bad.write_text("{not json")
    with pytest.raises(cl.OptionError, match="cannot read"):
        cl.RunnerFactory.create_runner(model, {"config_json": str(bad)})


#: A Vitis AI configuration file as the VAIML flow writes it (ORT's Vitis AI EP docs), plus
#: two runner options at its top level.
VITIS_AI_CONFIG = {
    "passes": [
        {"name": "init", "plugin": "vaip-pass_init"},
        {"name": "vaiml_partition", "plugin": "vaip-pass_vaiml_partition",
         "vaiml_config": {"device": "ve2", "optimize_level": 2}},
    ],
    "target": "VAIML",
    "targets": [{"name": "VAIML", "pass": ["init", "vaiml_partition"]}],
    "max_concurrent_runs": 4,
    "callback_order": "completion",
}  # fmt: skip


def test_a_vitis_ai_config_runs_with_its_foreign_keys_named_once(
    compiled_with_config, tmp_path: Path, caplog
) -> None:
    _source, model, _config_file = compiled_with_config
    config = tmp_path / "vitis_ai_config.json"
    config.write_text(json.dumps(VITIS_AI_CONFIG))
    with cl.RunnerFactory.create_runner(model, {"config_json": str(config)}, RUNNER) as runner:
        assert runner.get_property("max_concurrent_runs") == 4  # the keys copyless uses apply
        assert runner.get_property("callback_order") == "completion"
    warnings = [r for r in caplog.records if "ignoring key(s)" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"
    assert warnings[0].getMessage().endswith("ignoring key(s) copyless does not use: "
                                             "passes, target, targets")  # fmt: skip
    # beside copyless's own sections, foreign keys are named and ignored too
    config.write_text(json.dumps({"runner": {"max_concurrent_runs": 3}, "target": "VAIML"}))
    caplog.clear()
    with cl.RunnerFactory.create_runner(model, {"config_json": str(config)}, RUNNER) as runner:
        assert runner.get_property("max_concurrent_runs") == 3
    assert "ignoring key(s) copyless does not use: target" in caplog.text
    # a bad value of a key copyless uses is still an error, in one line
    config.write_text(json.dumps({**VITIS_AI_CONFIG, "max_concurrent_runs": "four"}))
    with pytest.raises(cl.OptionError, match="max_concurrent_runs") as info:
        cl.RunnerFactory.create_runner(model, {"config_json": str(config)}, RUNNER)
    assert "\n" not in str(info.value)
