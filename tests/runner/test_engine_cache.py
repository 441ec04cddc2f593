"""``cache_path``: engines compiled once are loaded from the cache the next time (onnxruntime's
optimized graph, OpenVINO's compiled blob), with the same results."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from runner_helpers import reference, tensors

import copyless as cl
from copyless.model import CompiledModel, compile_model, compile_to_memory, load_model

HW = cl.TensorType.HW
OK = cl.StatusCode.SUCCESS

# onnxruntime forced where a test reads its cache entries: VAIML's measured choice for a tiny
# net may be either engine
ORT = cl.RunnerType.ONNXRUNTIME


def _run(runner: cl.Runner, data: np.ndarray) -> np.ndarray:
    x, y = tensors(runner, HW)
    x.numpy()[...] = data
    assert runner.execute([[x]], [[y]]) is OK
    return y.numpy().copy()


@pytest.fixture
def data() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)


def test_second_load_is_served_from_the_cache(tiny, make_runner, tmp_path, data) -> None:
    model, compiled = tiny
    cache = tmp_path / "cache"
    first = make_runner(compiled, cache_path=str(cache))
    assert first.get_property("engine_cache") == {"path": str(cache), "hits": 0, "stored": 1}
    second = make_runner(compiled, cache_path=str(cache))
    assert second.get_property("engine_cache") == {"path": str(cache), "hits": 1, "stored": 0}
    expected = reference(model, {"input": data})[0]
    for runner in (first, second):
        np.testing.assert_allclose(_run(runner, data), expected, rtol=1e-4, atol=1e-5)
    assert make_runner(compiled).get_property("engine_cache") is None


def test_every_partition_and_the_async_engines_are_cached(tmp_path, data) -> None:
    from runner_helpers import conv_net

    net = conv_net()
    compiled = compile_to_memory(net, cpu_tail=True)
    options = {"cache_path": str(tmp_path), "num_threads": 0, "warm_up": True}
    with cl.RunnerFactory.from_compiled(compiled, options, ORT) as runner:
        # two partitions, sync and (when the cores are split) async engines
        stats = runner.get_property("engine_cache")
        engines = runner.get_property("engines_loaded")
        assert stats["hits"] + stats["stored"] == engines
        assert stats["stored"] == 2  # one optimized graph per partition
    with cl.RunnerFactory.from_compiled(compiled, options, ORT) as runner:
        assert runner.get_property("engine_cache")["hits"] == engines
        expected = reference(net, {"input": data})[0]
        np.testing.assert_allclose(_run(runner, data), expected, rtol=1e-4, atol=1e-5)


def test_a_damaged_cache_entry_is_rebuilt(tiny, tmp_path, data, caplog) -> None:
    model, compiled = tiny
    options = {"cache_path": str(tmp_path)}
    cl.RunnerFactory.from_compiled(compiled, options, ORT).close()
    (entry,) = tmp_path.glob("*/onnxruntime-*/model.onnx")
    entry.write_bytes(b"not an onnx graph")
    runner = cl.RunnerFactory.from_compiled
    with caplog.at_level(logging.WARNING), runner(compiled, options, ORT) as r:
        assert r.get_property("engine_cache")["stored"] == 1
        np.testing.assert_allclose(
            _run(r, data), reference(model, {"input": data})[0], rtol=1e-4, atol=1e-5
        )
    assert "unusable, rebuilding" in caplog.text
    assert onnx.load(entry).graph.node  # a real graph again


def test_load_model_cache_path_is_used_not_dropped(net_file: Path, tmp_path) -> None:
    cache = tmp_path / "from-load-model"
    model = load_model(net_file, cache_path=cache)
    assert model.cache_path == str(cache) and model == load_model(net_file)
    with cl.RunnerFactory.from_compiled(model, None, ORT) as runner:
        assert runner.get_property("engine_cache")["stored"] == 1
    assert list(cache.glob("*/onnxruntime-*/model.onnx"))
    with pytest.raises(cl.OptionError, match="cache_path"):
        load_model(net_file, cache_path=42)  # type: ignore[arg-type]


def test_create_runner_cache_path_option(net_file: Path, tmp_path) -> None:
    options = {"cache_path": str(tmp_path / "c")}
    # onnxruntime forced: VAIML measures both engines, and which one it keeps (whose cache
    # counts are read) depends on the machine
    for expected in ({"hits": 0, "stored": 1}, {"hits": 1, "stored": 0}):
        with cl.RunnerFactory.create_runner(net_file, options, ORT) as runner:
            stats = runner.get_property("engine_cache")
            assert {k: stats[k] for k in expected} == expected


def test_an_unusable_cache_path_is_an_option_error(tiny, tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    with pytest.raises(cl.OptionError, match="cache_path"):
        cl.RunnerFactory.from_compiled(tiny[1], {"cache_path": str(blocker / "sub")})


@pytest.fixture
def net_file(tiny: tuple[onnx.ModelProto, CompiledModel], tmp_path: Path) -> Path:
    return compile_model(tiny[0], tmp_path / "net.rai")


def test_a_measured_engine_choice_counts_what_its_candidates_stored(tmp_path, monkeypatch) -> None:
    """VAIML on a model with no recorded choice loads both engines with the same cache
    folder: the winner's counts include the entries the other candidate stored (the cpu
    partition's onnxruntime graph is a hit for OpenVINO's runner). What
    test_every_partition... saw once on a fresh cache, where OpenVINO won: stored 1, not 2.
    A recorded choice (the second runner) loads one engine: every entry its own."""
    pytest.importorskip("openvino")
    from runner_helpers import conv_net

    import copyless.runner._choice as choice

    monkeypatch.setenv("COPYLESS_CACHE_DIR", str(tmp_path / "root"))  # no recorded choice
    monkeypatch.setattr(choice, "TIE", -10.0)  # OpenVINO wins the measurement
    compiled = compile_to_memory(conv_net(), cpu_tail=True)
    options = {"cache_path": str(tmp_path / "engines"), "num_threads": 0, "warm_up": True}
    with cl.RunnerFactory.from_compiled(compiled, options) as runner:
        assert runner.engine is cl.RunnerType.OPENVINO
        stats, engines = runner.get_property("engine_cache"), runner.get_property("engines_loaded")
        assert stats["hits"] + stats["stored"] == engines
        assert stats["stored"] == 1  # OpenVINO's par_0; par_1 was the other candidate's
    assert len(list((tmp_path / "engines").glob("*/onnxruntime-*/model.onnx"))) == 2
    with cl.RunnerFactory.from_compiled(compiled, options) as runner:
        assert runner.engine is cl.RunnerType.OPENVINO  # the recorded choice
        assert runner.get_property("engine_cache")["stored"] == 0
