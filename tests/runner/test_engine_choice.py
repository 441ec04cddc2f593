"""RunnerType.VAIML: the engine measured fastest for a model here, cached per model, engine
versions and CPU; a corrupt or foreign cache is ignored and rewritten; forced types stay."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

import copyless as cl
from copyless.model import CompiledModel, compile_to_memory
from copyless.runner import Runner, RunnerFactory
from copyless.runner._choice import EngineChoice
from model_helpers import conv_net, unknown_rank_model

CPU_VIEWS = {"input_tensor_type": "CPU", "output_tensor_type": "CPU"}
ORT, OV, VAIML = cl.RunnerType.ONNXRUNTIME, cl.RunnerType.OPENVINO, cl.RunnerType.VAIML


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COPYLESS_CACHE_DIR", str(tmp_path))
    return tmp_path / "engines"


@pytest.fixture(scope="module")
def compiled() -> CompiledModel:
    return compile_to_memory(conv_net(size=32, channels=8))


def _only_file(folder: Path) -> Path:
    files = list(folder.glob("*.json"))
    assert len(files) == 1, files
    return files[0]


def _outputs(runner: Runner, x: np.ndarray) -> np.ndarray:
    info_in = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.CPU)[0]
    info_out = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.CPU)[0]
    y = np.zeros(info_out.shape, info_out.numpy_dtype)
    ins = [cl.NpuTensor(info_in, x, cl.MemoryType.USER_POINTER_NON_CMA)]
    outs = [cl.NpuTensor(info_out, y, cl.MemoryType.USER_POINTER_NON_CMA)]
    assert runner.execute([ins], [outs]) is cl.StatusCode.SUCCESS
    return y


def test_vaiml_is_the_default_measures_once_and_says_which(compiled, cache_dir, caplog) -> None:
    caplog.set_level(logging.INFO, logger="copyless.runner")
    with RunnerFactory.from_compiled(compiled, CPU_VIEWS) as runner:
        choice = runner.engine_choice
        assert runner.get_property("runner_type") is VAIML and choice.requested is VAIML
        assert runner.engine in (ORT, OV) and not choice.cached
        assert runner.get_property("engine") == choice.engine_name
        assert set(choice.medians_ms) == {"onnxruntime", "openvino"}
        ort, ov = choice.medians_ms["onnxruntime"], choice.medians_ms["openvino"]
        assert choice.engine_name == ("openvino" if ov < 0.97 * ort else "onnxruntime")
        assert runner.engine_reason.startswith("measured fastest here at the compiled precision")
        x = np.random.default_rng(0).standard_normal((1, 8, 32, 32)).astype(np.float32)
        chosen = _outputs(runner, x)
    lines = [r.getMessage() for r in caplog.records if "runs on" in r.getMessage()]
    assert len(lines) == 1 and choice.engine_name in lines[0]
    record = json.loads(_only_file(cache_dir).read_text())
    assert record["engine"] == choice.engine_name and record["format"] == 2
    assert {"onnxruntime", "openvino"} <= set(record["versions"]) and record["cpu_name"]
    # same answers as the engine forced directly
    with RunnerFactory.from_compiled(compiled, CPU_VIEWS, runner.engine) as forced:
        np.testing.assert_allclose(chosen, _outputs(forced, x), rtol=1e-5, atol=1e-5)


def test_the_cached_choice_is_used_without_measuring(compiled, cache_dir) -> None:
    with RunnerFactory.from_compiled(compiled) as runner:
        first = runner.engine
    path = _only_file(cache_dir)
    record = json.loads(path.read_text())
    other = "openvino" if first is ORT else "onnxruntime"
    record["engine"] = other  # what the cache says wins, measured or not
    record["busy"] = None  # (a busy record is measured again on a quiet machine)
    record["medians_ms"] = {"onnxruntime": 1e6, "openvino": 1e6}  # the first runs agree
    path.write_text(json.dumps(record))
    with RunnerFactory.from_compiled(compiled) as runner:
        assert runner.engine_choice.cached and runner.get_property("engine") == other
        assert runner.engine_reason.startswith("cached: measured fastest")


@pytest.mark.parametrize(
    "spoil",
    [
        lambda text, record: "{not json",
        lambda text, record: json.dumps([1, 2]),
        lambda text, record: json.dumps({**record, "engine": "tensorflow"}),
        lambda text, record: json.dumps({**record, "cpu": "0badc0de"}),
        lambda text, record: json.dumps({**record, "cpu_name": "Another CPU"}),
        lambda text, record: json.dumps({**record, "versions": {"onnxruntime": "0.1"}}),
        lambda text, record: json.dumps({k: v for k, v in record.items() if k != "medians_ms"}),
    ],
    ids=["not-json", "not-object", "unknown-engine", "other-cpu-flags", "other-cpu-name",
         "other-versions", "missing-key"],
)
def test_a_corrupt_or_foreign_cache_is_ignored_and_rewritten(
    compiled, cache_dir, spoil, caplog
) -> None:
    with RunnerFactory.from_compiled(compiled):
        pass
    path = _only_file(cache_dir)
    good = json.loads(path.read_text())
    path.write_text(spoil(path.read_text(), good))
    caplog.set_level(logging.INFO, logger="copyless.runner")
    with RunnerFactory.from_compiled(compiled) as runner:
        assert not runner.engine_choice.cached  # measured again, never trusted
        assert runner.engine_reason.startswith("measured fastest")
    assert any("measuring again" in r.getMessage() for r in caplog.records)
    rewritten = json.loads(path.read_text())
    assert {k: rewritten[k] for k in ("format", "cpu", "cpu_name", "versions")} == {
        k: good[k] for k in ("format", "cpu", "cpu_name", "versions")
    }


def test_forced_engines_measure_nothing(compiled, cache_dir) -> None:
    for engine in (ORT, OV):
        with RunnerFactory.from_compiled(compiled, None, engine) as runner:
            assert runner.engine is engine and runner.get_property("runner_type") is engine
            assert runner.engine_reason == f"forced by runner_type=RunnerType.{engine.name}"
    assert not cache_dir.exists()


def test_without_openvino_vaiml_is_onnxruntime_and_says_so(compiled, cache_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # as if it were not installed
    with RunnerFactory.from_compiled(compiled) as runner:
        assert runner.engine is ORT
        assert "OpenVINO is not installed" in runner.engine_reason
    assert not cache_dir.exists()


def test_under_address_sanitizer_openvino_is_not_loaded(compiled, cache_dir, monkeypatch):
    """OpenVINO aborts a process that preloads ASan (fuzz/sanitize.py's test build): the
    default runner runs onnxruntime there, and says why, instead of loading it to measure."""
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/gcc/x86_64-linux-gnu/12/libasan.so")
    with RunnerFactory.from_compiled(compiled) as runner:
        assert runner.engine is ORT
        assert "AddressSanitizer" in runner.engine_reason
    assert not cache_dir.exists()


def test_dims_unknown_until_run_time_are_not_measured(cache_dir) -> None:
    model = compile_to_memory(unknown_rank_model())
    with RunnerFactory.from_compiled(model) as runner:
        assert runner.engine is ORT and "not measured" in runner.engine_reason


def test_openvino_device_names_choose_openvino(compiled, cache_dir) -> None:
    with RunnerFactory.from_compiled(compiled, {"device": "CPU"}) as runner:
        assert runner.engine is OV and "OpenVINO device" in runner.engine_reason


def test_a_chosen_openvino_runs_float_graphs_in_f32(compiled, cache_dir) -> None:
    """OpenVINO's automatic bf16 (AVX512-BF16/AMX CPUs) is never chosen silently."""
    with RunnerFactory.from_compiled(compiled, {"device": "CPU"}) as runner:
        engine = runner._engines.loaded[0]  # the OpenVINO engine the choice kept
        assert engine.compiled_model.get_property("INFERENCE_PRECISION_HINT").to_string() == "f32"


def test_a_cached_engine_that_cannot_load_the_model_is_measured_again(
    cache_dir, caplog
) -> None:
    """A cache naming openvino for a model OpenVINO refuses (a Conv without its weights):
    the runner says so and measures again, where onnxruntime finds the graph corrupt: one
    ModelLoadError, and OpenVINO's reader is never given it (it crashed on such graphs)."""
    import onnx
    import onnx.helper as oh

    from copyless.runner import parse_options
    from copyless.runner._choice import _cache_file, _write

    f32 = onnx.TensorProto.FLOAT
    graph = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["y"])], "g",
        [oh.make_tensor_value_info("x", f32, [1, 4])],
        [oh.make_tensor_value_info("y", f32, [1, 4])],
    )  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = compile_to_memory(model)
    broken = compiled.partitions[0].onnx_bytes.replace(b"Relu", b"Conv")  # 1 input: malformed
    partition = dataclasses.replace(compiled.partitions[0], onnx_bytes=broken)
    spoiled = dataclasses.replace(compiled, partitions=(partition,))
    with pytest.raises(cl.ModelLoadError, match="malformed graph"):
        RunnerFactory.from_compiled(spoiled, None, OV)
    path, record = _cache_file(spoiled, parse_options(None))
    _write(path, record, EngineChoice(OV, VAIML, "measured earlier", {"openvino": 1.0}))
    caplog.set_level(logging.WARNING, logger="copyless.runner")
    with pytest.raises(cl.ModelLoadError, match="onnxruntime refused the graph"):
        RunnerFactory.from_compiled(spoiled)
    assert "the cached engine openvino cannot load it" in caplog.text


def test_a_model_that_fails_on_zeros_still_loads_on_onnxruntime(cache_dir) -> None:
    """y = sum(range(0, 6, d)): d = 0 (the measuring run's zeros) makes the run fail; the
    model is fine with real inputs, so the default runner loads it on onnxruntime (said)."""
    import onnx
    import onnx.helper as oh
    import onnx.numpy_helper as onh

    f32 = onnx.TensorProto.FLOAT
    graph = oh.make_graph(
        [oh.make_node("Range", ["zero", "six", "d"], ["r"]),
         oh.make_node("ReduceSum", ["r"], ["t"], keepdims=0),
         oh.make_node("Reshape", ["t", "one"], ["y"])],
        "range_by_input",
        [oh.make_tensor_value_info("d", f32, [])],
        [oh.make_tensor_value_info("y", f32, [1])],
        initializer=[onh.from_array(np.array(0, np.float32), "zero"),
                     onh.from_array(np.array(6, np.float32), "six"),
                     onh.from_array(np.array([1], np.int64), "one")],
    )  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    with RunnerFactory.from_compiled(compile_to_memory(model)) as runner:
        assert runner.engine is ORT
        assert runner.engine_reason.startswith("not measured: a run on zeros gave"), (
            runner.engine_reason
        )
        infos = runner.get_tensors_info
        ins = [runner.allocate_npu_tensor(i) for i in infos(cl.TensorDirection.INPUT)]
        outs = [runner.allocate_npu_tensor(i) for i in infos(cl.TensorDirection.OUTPUT)]
        ins[0].numpy()[...] = 2.0  # 0 + 2 + 4
        assert runner.execute([ins], [outs]) is cl.StatusCode.SUCCESS
        assert outs[0].numpy()[0] == 6.0
    assert not cache_dir.exists()  # nothing measured, nothing cached


# -- the measurement itself, on stand-in runners of known speed (no engine's noise) ----------
class Timed:
    """A stand-in runner (``_choice.Candidate``) whose n-th execute sleeps ``delay(n)`` ms."""

    def __init__(self, delay) -> None:
        self.delay, self.calls, self.closed = delay, 0, False

    def warm_up(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def get_tensors_info(self, direction, tensor_type=None) -> list:
        return []

    def allocate_npu_tensor(self, info, memory_bank=None) -> None:
        raise AssertionError("no tensors to allocate")

    def execute(self, inputs, outputs) -> cl.StatusCode:
        import time

        time.sleep(self.delay(self.calls) / 1e3)
        self.calls += 1
        return cl.StatusCode.SUCCESS


def _choose(compiled, ort, ov, built=None):
    from copyless.runner import parse_options
    from copyless.runner._choice import choose_engine

    def build(engine, options):
        runner = Timed(ort if engine is ORT else ov)
        if built is not None:
            built.append((engine, runner))
        return runner

    return choose_engine(compiled, parse_options(None), build)


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine as quiet as it needs to be (the tests' own load is not the point)."""
    import copyless.runner._choice as choice

    class Quiet:
        def others_share(self) -> float:
            return 0.0

    monkeypatch.setattr(choice, "CpuLoad", Quiet)
    monkeypatch.setattr(choice, "machine_busy", lambda: False)


def test_each_engine_is_judged_by_its_best_round(compiled, cache_dir, quiet) -> None:
    """OpenVINO (3 ms) is hit by a burst of load (12 ms) in its first 12 runs, onnxruntime
    (4 ms) never: medians over all runs would keep onnxruntime; the best rounds pick
    OpenVINO, and the loser is closed."""
    built: list = []
    runner, choice = _choose(compiled, lambda n: 4.0, lambda n: 12.0 if n <= 12 else 3.0, built)
    assert choice.engine is OV and runner is dict(built)[OV]
    assert dict(built)[ORT].closed and not runner.closed
    assert 2.9 <= choice.medians_ms["openvino"] < 3.8 and choice.medians_ms["onnxruntime"] >= 3.9
    assert "best round median openvino" in choice.reason and choice.busy is None


@pytest.mark.parametrize(("ov_ms", "engine"), [(9.3, OV), (9.9, ORT)], ids=["7%", "1%"])
def test_a_lead_over_the_tie_is_enough(compiled, cache_dir, quiet, ov_ms, engine) -> None:
    """The default runs within 1.03x of the faster engine (it took a 10% lead before)."""
    _, choice = _choose(compiled, lambda n: 10.0, lambda n: ov_ms)
    assert choice.engine is engine


def test_a_busy_measurement_says_so_and_is_measured_again_when_quiet(
    compiled, cache_dir, monkeypatch, caplog
) -> None:
    import copyless.runner._choice as choice_module

    class Busy:
        def others_share(self) -> float:
            return 0.6

    monkeypatch.setattr(choice_module, "CpuLoad", Busy)
    _, choice = _choose(compiled, lambda n: 2.0, lambda n: 4.0)
    assert choice.busy == 0.6 and "while the machine was busy: others used 60%" in choice.reason
    record = json.loads(_only_file(cache_dir).read_text())
    assert record["busy"] == 0.6  # cached, and marked
    monkeypatch.setattr(choice_module, "machine_busy", lambda: True)  # still busy: used
    _, again = _choose(compiled, lambda n: 2.0, lambda n: 4.0)
    assert again.cached and again.busy == 0.6 and "busy" in again.reason
    monkeypatch.setattr(choice_module, "machine_busy", lambda: False)  # quiet: measured again
    caplog.set_level(logging.INFO, logger="copyless.runner")
    _, fresh = _choose(compiled, lambda n: 2.0, lambda n: 4.0)
    assert not fresh.cached and fresh.busy == 0.6  # (this stand-in machine stays busy)
    assert "measured on a busy machine" in caplog.text


def test_a_cached_choice_the_first_runs_contradict_is_measured_again(
    compiled, cache_dir, quiet, caplog
) -> None:
    _, first = _choose(compiled, lambda n: 2.0, lambda n: 5.0)  # onnxruntime 2 ms, cached
    assert first.engine is ORT
    _, agreed = _choose(compiled, lambda n: 2.2, lambda n: 5.0)  # the same, give or take
    assert agreed.cached and agreed.engine is ORT
    caplog.set_level(logging.INFO, logger="copyless.runner")
    _, again = _choose(compiled, lambda n: 8.0, lambda n: 5.0)  # onnxruntime now 8 ms
    assert not again.cached and again.engine is OV
    assert "the first runs disagree with the cached engine choice" in caplog.text
    assert json.loads(_only_file(cache_dir).read_text())["engine"] == "openvino"


def test_first_runs_slowed_by_others_leave_the_cached_choice(
    compiled, cache_dir, quiet, monkeypatch, caplog
) -> None:
    """A runner starting on a loaded machine (a Ray actor beside its decode tasks) does not
    re-measure: slow first runs while others hold the CPUs time the load, not the engines."""
    import copyless.runner._choice as choice_module

    _, first = _choose(compiled, lambda n: 2.0, lambda n: 5.0)  # onnxruntime 2 ms, cached
    assert first.engine is ORT

    class Busy:
        def others_share(self) -> float:
            return 0.7

    monkeypatch.setattr(choice_module, "CpuLoad", Busy)
    caplog.set_level(logging.INFO, logger="copyless.runner")
    _, kept = _choose(compiled, lambda n: 8.0, lambda n: 5.0)  # slow now, machine busy
    assert kept.cached and kept.engine is ORT
    assert "the cached engine choice stands" in caplog.text
    assert "disagree" not in caplog.text
    assert json.loads(_only_file(cache_dir).read_text())["engine"] == "onnxruntime"
