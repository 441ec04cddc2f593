"""Runner options (validated at creation), queries, properties, allocation, profiling."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from runner_helpers import tensors

import copyless as cl
from copyless.runner import KNOWN_OPTIONS, RunnerFactory, parse_options

IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
HW, CPU = cl.TensorType.HW, cl.TensorType.CPU


def test_defaults_are_vart_mls() -> None:
    options = parse_options(None)
    assert (options.input_tensor_type, options.output_tensor_type) == ("HW", "HW")
    assert options.max_concurrent_runs == 2 and options.async_threadpool_depth == 10
    assert options.callback_order == "submission" and options.log_level == "INFO"
    for key in (
        "skip_in_bo_sync",
        "cma_index",
        "aie_columns_sharing",
        "start_column",
        "debug",
        "config_json",
        "cache_path",
        "ai_analyzer_profiling",
        "device",
    ):
        assert key in KNOWN_OPTIONS


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"no_such_option": 1}, "no_such_option"),
        ({"input_tensor_type": "GPU"}, "input_tensor_type"),
        ({"max_concurrent_runs": 0}, "max_concurrent_runs"),
        ({"max_concurrent_runs": "2"}, "max_concurrent_runs"),
        ({"async_threadpool_depth": True}, "async_threadpool_depth"),
        ({"callback_order": "random"}, "callback_order"),
        ({"log_level": "LOUD"}, "log_level"),
        ({"debug": "yes"}, "debug"),
        ({"device": "npu"}, "device"),
        ({"config_json": "/no/such/file.json"}, "config_json"),
        ({"start_column": -1}, "start_column"),
        ({"start_column": 1.5}, "start_column"),
        ({"cma_index": 1}, "one bank"),
        ({"cma_index": -1}, "cma_index"),
        ({"aie_columns_sharing": "yes"}, "aie_columns_sharing"),
        ({"skip_in_bo_sync": 1}, "skip_in_bo_sync"),
        ({"skip_out_bo_sync": None}, "skip_out_bo_sync"),
        ({"cache_path": 3}, "cache_path"),
    ],
)
def test_bad_options_raise_option_error_naming_the_key(tiny, options, needle) -> None:
    with pytest.raises(cl.OptionError, match=needle) as info:
        RunnerFactory.from_compiled(tiny[1], options)
    assert isinstance(info.value, ValueError)


def test_unknown_option_lists_the_accepted_ones() -> None:
    with pytest.raises(cl.OptionError, match="max_concurrent_runs"):
        parse_options({"bogus": 1})


def test_config_json_supplies_options(tmp_path) -> None:
    path = tmp_path / "vitis_ai_config.json"
    path.write_text(json.dumps({"max_concurrent_runs": 3, "callback_order": "completion"}))
    options = parse_options({"config_json": str(path), "max_concurrent_runs": 5})
    assert options.max_concurrent_runs == 5 and options.callback_order == "completion"


def test_log_level_filters_the_runners_own_messages_and_configures_nothing(
    tiny_rgbx, make_runner, tmp_path, caplog
) -> None:
    """log_level is a threshold on the runner's own records; the library sets no level on
    any logger (regression: create_runner set the "copyless" logger's level each time)."""
    root = logging.getLogger("copyless")
    before = (root.level, list(root.handlers))
    caplog.set_level(logging.DEBUG)
    for level in ("ERROR", "INFO", "DEBUG"):
        caplog.clear()
        runner = make_runner(tiny_rgbx[1], log_level=level, ai_analyzer_profiling=True,
                             profile_path=str(tmp_path / f"{level}.json"))  # fmt: skip
        assert (root.level, root.handlers) == before
        assert runner.execute([[None]], [[None]]) is cl.StatusCode.INVALID_INPUT  # an ERROR
        x, y = tensors(runner, CPU)
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
        runner.close()  # INFO: "profiling trace written to ..."
        mine = [r for r in caplog.records if r.name.startswith("copyless.runner")]
        levels = {r.levelname for r in mine}
        assert "ERROR" in levels
        assert ("INFO" in levels) is (level != "ERROR")
        assert all(r.filename == "_runner.py" for r in mine if r.levelname == "INFO")
    caplog.clear()
    runner = make_runner(tiny_rgbx[1], debug=True)
    x, y = tensors(runner, CPU)
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    assert any(r.levelname == "DEBUG" and "bytes converted" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_queries(tiny_rgbx, make_runner) -> None:
    _, compiled = tiny_rgbx
    runner = make_runner(compiled)
    assert runner.get_num_input_tensors() == 1 and runner.get_num_output_tensors() == 1
    (hw,) = runner.get_tensors_info(IN, HW)
    (cpu,) = runner.get_tensors_info(IN, CPU)
    assert hw.tensor_type is HW and hw.data_type is cl.DataType.UINT8
    assert hw.memory_layout is cl.MemoryLayout.NHWC4 and hw.shape == (1, 16, 16, 4)
    assert cpu.shape == (1, 3, 16, 16) and cpu.data_type is cl.DataType.FLOAT32
    assert runner.get_tensors_info(IN) == [hw]  # default view: input_tensor_type "HW"
    assert runner.get_tensor_info_by_name("input", CPU) == cpu
    with pytest.raises(KeyError):
        runner.get_tensor_info_by_name("nope", HW)
    with pytest.raises(cl.CopylessError):
        runner.get_tensor_info_by_name("nope", HW)
    quant = runner.get_quant_parameters("input")
    assert (quant.scale, quant.zero_point) == (1.0, 0)
    assert runner.get_batch_size() == 1
    assert runner.get_property("backend") in ("onnxruntime", "openvino")
    assert runner.get_property("device")
    x, y = tensors(runner, HW)
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    assert runner.get_property("jobs_run") == 1
    with pytest.raises(cl.CopylessError):
        runner.get_property("no_such_property")


def test_allocation_and_sub_tensors(tiny, make_runner) -> None:
    runner = make_runner(tiny[1])
    (info,) = runner.get_tensors_info(IN, HW)
    tensor = runner.allocate_npu_tensor(info)
    assert tensor.memory_type is cl.MemoryType.XRT_BO
    fd = tensor.export_buffer()
    assert fd >= 0
    import os

    os.close(fd)
    half = info.with_shape((1, 3, 8, 16))
    sub = runner.allocate_sub_tensor(tensor, half, half.size_in_bytes)
    sub.numpy()[...] = 7.0
    assert np.all(tensor.numpy().reshape(-1)[half.size :] == 7.0)
    with pytest.raises(cl.CopylessError):
        runner.allocate_sub_tensor(tensor, half, info.size_in_bytes)  # out of bounds
    with pytest.raises(cl.CopylessError):
        runner.allocate_sub_tensor(sub, half.with_shape((1, 1, 1, 1)), 0)  # nested


def test_profiling_writes_a_chrome_trace(tiny_rgbx, make_runner, tmp_path) -> None:
    path = tmp_path / "trace.json"
    runner = make_runner(tiny_rgbx[1], ai_analyzer_profiling=True, profile_path=str(path))
    x, y = tensors(runner, CPU)
    for _ in range(3):
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    handle = runner.execute_async([[x]], [[y]])
    assert runner.wait(handle, 5000) is cl.StatusCode.SUCCESS
    runner.close()
    events = json.loads(path.read_text())  # the trace format's JSON array form
    names = {event["name"] for event in events}
    assert {"convert_in", "engine:par_0", "convert_out"} <= names
    assert all(event["ph"] == "X" and event["dur"] >= 0 for event in events)
    assert handle.job_id in {event["args"]["job"] for event in events}


def test_profiling_trace_is_streamed_not_held(tiny_rgbx, make_runner, tmp_path) -> None:
    """A long profiled run holds at most FLUSH_EVENTS events in memory: the rest are in the
    file already, before close (regression: every event was kept until close)."""
    from copyless.runner._trace import FLUSH_EVENTS

    path = tmp_path / "long.json"
    runner = make_runner(tiny_rgbx[1], ai_analyzer_profiling=True, profile_path=str(path))
    x, y = tensors(runner, CPU)
    runs = FLUSH_EVENTS  # 3 events each (convert_in, engine, convert_out)
    for _ in range(runs):
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    recorded = runner.get_property("trace_events")
    assert recorded >= 3 * runs
    assert runner._trace.held < FLUSH_EVENTS
    on_disk = path.read_text().count('"ph": "X"')
    assert on_disk >= recorded - FLUSH_EVENTS
    runner.close()
    assert len(json.loads(path.read_text())) == recorded


def test_profiling_path_that_cannot_be_written_is_an_option_error(tiny, make_runner, tmp_path):
    with pytest.raises(cl.OptionError, match="profiling trace"):
        make_runner(tiny[1], ai_analyzer_profiling=True,
                    profile_path=str(tmp_path / "no" / "such" / "dir" / "t.json"))  # fmt: skip


def test_vart_resource_options_validated_and_accepted(tiny, make_runner) -> None:
    """Options with no meaning on these engines are validated and accepted (README table)."""
    runner = make_runner(tiny[1], cma_index=0, aie_columns_sharing=False, start_column=4)
    assert runner.get_property("start_column") == 4
    (info,) = runner.get_tensors_info(IN, HW)
    assert runner.allocate_npu_tensor(info, memory_bank=0).memory_type is cl.MemoryType.XRT_BO
    for bank in (1, -1, True, "0"):
        with pytest.raises(cl.TensorError, match="memory_bank"):
            runner.allocate_npu_tensor(info, memory_bank=bank)


def test_get_batch_size_checks_its_direction(tiny_batch4, make_runner) -> None:
    runner = make_runner(tiny_batch4[1])
    assert runner.get_batch_size() == runner.get_batch_size(IN) == runner.get_batch_size(OUT) == 4
    with pytest.raises(TypeError, match="direction"):
        runner.get_batch_size("INPUT")


def test_the_readme_table_lists_every_option() -> None:
    """One table of the options and their meaning per engine: docs/guides/options.md."""
    from pathlib import Path

    section = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "options.md").read_text()
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    listed = {key for row in rows for key in KNOWN_OPTIONS if f"`{key}`" in row.split("|")[1]}
    assert listed == set(KNOWN_OPTIONS), sorted(set(KNOWN_OPTIONS) - listed)
