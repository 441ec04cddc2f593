"""OpenVINO backend through the runner: parity with ONNX Runtime, dtypes, INT8, statuses.

Every check runs the same compiled model on both backends, so ONNX Runtime is the reference
and nothing is hard-coded.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest
from PIL import Image

import copyless as cl
from copyless.backends._openvino import OpenVinoBackend
from copyless.model import CompiledModel, compile_to_memory, zoo
from copyless.runner import Runner, RunnerFactory
from copyless.runner._options import parse_options

HW, CPU = cl.TensorType.HW, cl.TensorType.CPU
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
OV, ORT = cl.RunnerType.OPENVINO, cl.RunnerType.ONNXRUNTIME


def conv_net(size: int = 32, features: int = 8) -> onnx.ModelProto:
    """Conv(3->features) + Relu + Conv(features->4): an image-sized output."""
    rng = np.random.default_rng(0)
    inits = [
        onh.from_array(rng.standard_normal((features, 3, 3, 3)).astype(np.float32) * 0.3, "w1"),
        onh.from_array(rng.standard_normal(features).astype(np.float32) * 0.1, "b1"),
        onh.from_array(rng.standard_normal((4, features, 1, 1)).astype(np.float32) * 0.3, "w2"),
        onh.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b2"),
    ]
    nodes = [
        oh.make_node("Conv", ["input", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c"], ["r"]),
        oh.make_node("Conv", ["r", "w2", "b2"], ["output"]),
    ]
    graph = oh.make_graph(
        nodes,
        "ov_conv_net",
        [oh.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 3, size, size])],
        [oh.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [1, 4, size, size])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


@pytest.fixture
def pair() -> Iterator[Callable[..., tuple[Runner, Runner]]]:
    """``pair(compiled, **options)``: the same model on OpenVINO and on ONNX Runtime."""
    made: list[Runner] = []

    def make(compiled: CompiledModel, **options: Any) -> tuple[Runner, Runner]:
        runners = tuple(RunnerFactory.from_compiled(compiled, options, rt) for rt in (OV, ORT))
        made.extend(runners)
        return runners[0], runners[1]

    yield make
    for runner in made:
        runner.close()


def run_hw(runner: Runner, data: np.ndarray) -> np.ndarray:
    """Execute on runner-allocated HW tensors; returns a copy of the output."""
    (in_info,) = runner.get_tensors_info(IN, HW)
    (out_info,) = runner.get_tensors_info(OUT, HW)
    x, y = runner.allocate_npu_tensor(in_info), runner.allocate_npu_tensor(out_info)
    x.numpy()[...] = data
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    return y.numpy().copy()


def tolerance(runner: Runner) -> float:
    """f32 inference: copyless asks OpenVINO for the precision the graph declares."""
    engine = OpenVinoBackend(parse_options(None)).load(runner.model.partitions[0], 1)
    precision = engine.compiled_model.get_property("INFERENCE_PRECISION_HINT").to_string()
    assert precision == "f32", precision
    return 1e-4


def test_float_model_matches_onnxruntime_in_place(pair) -> None:
    ov_runner, ort_runner = pair(compile_to_memory(conv_net()))
    assert ov_runner.get_property("backend") == "openvino"
    assert ov_runner.get_property("device") == "CPU"
    data = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = run_hw(ort_runner, data)
    np.testing.assert_allclose(run_hw(ov_runner, data), expected, atol=tolerance(ov_runner))
    assert ov_runner.get_property("bytes_converted") == 0


def test_steady_execute_allocates_far_less_than_the_tensors(pair) -> None:
    ov_runner, _ = pair(compile_to_memory(conv_net(size=256)))
    x = ov_runner.allocate_npu_tensor(ov_runner.get_tensors_info(IN, HW)[0])
    y = ov_runner.allocate_npu_tensor(ov_runner.get_tensors_info(OUT, HW)[0])
    x.numpy()[...] = 0.5
    y.numpy()[...] = np.nan
    assert ov_runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS  # warm: plan, bindings
    assert np.isfinite(y.numpy()).all()
    tracemalloc.start()
    for _ in range(3):
        assert ov_runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < y.info.size_in_bytes // 50, f"{peak} bytes allocated per run"


def _photo_input(prep: zoo.Preprocessing) -> np.ndarray:
    image = Image.open(zoo.photo_path("chelsea.jpg")).convert("RGB")
    scale = prep.resize / min(image.size)
    image = image.resize((round(image.width * scale), round(image.height * scale)))
    h, w = prep.size
    left, top = (image.width - w) // 2, (image.height - h) // 2
    rgb = np.asarray(image.crop((left, top, left + w, top + h)), dtype=np.float32)
    x = (rgb - np.array(prep.mean, np.float32)) / np.array(prep.std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


@pytest.mark.slow
def test_efficientnet_lite0_matches_onnxruntime(pair, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    ov_runner, ort_runner = pair(compile_to_memory(zoo.build("efficientnet-lite0")))
    data = _photo_input(zoo.preprocessing("efficientnet-lite0"))
    expected, got = run_hw(ort_runner, data), run_hw(ov_runner, data)
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, atol=scale * tolerance(ov_runner) * 10)
    assert int(got.argmax()) == int(expected.argmax())
    assert int(got.argmax()) in (281, 282, 285)  # a tabby cat: the model really ran


@pytest.mark.parametrize(
    ("options", "dtype"),
    [
        ({"input_dtype": "bf16", "output_dtype": "bf16"}, cl.DataType.BF16),
        ({"input_dtype": "fp16", "output_dtype": "fp16"}, cl.DataType.FP16),
    ],
    ids=["bf16", "fp16"],
)
def test_half_precision_views_match_onnxruntime(pair, options, dtype) -> None:
    ov_runner, ort_runner = pair(compile_to_memory(conv_net(), **options))
    (in_info,) = ov_runner.get_tensors_info(IN, HW)
    assert in_info.data_type is dtype
    data = np.random.default_rng(2).standard_normal(in_info.shape).astype(dtype.to_numpy())
    expected = run_hw(ort_runner, data).astype(np.float32)
    got = run_hw(ov_runner, data).astype(np.float32)
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=5e-2)


def test_rgbx_uint8_input_matches_onnxruntime(pair) -> None:
    compiled = compile_to_memory(
        conv_net(), input_format="rgbx", mean=(127.0,) * 3, std=(128.0,) * 3
    )
    ov_runner, ort_runner = pair(compiled)
    (in_info,) = ov_runner.get_tensors_info(IN, HW)
    assert in_info.data_type is cl.DataType.UINT8
    data = np.random.default_rng(3).integers(0, 256, in_info.shape, dtype=np.uint8)
    np.testing.assert_allclose(
        run_hw(ov_runner, data), run_hw(ort_runner, data), atol=tolerance(ov_runner) * 10
    )


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory: pytest.TempPathFactory) -> CompiledModel:
    from model_helpers import calibration_folder

    photos = calibration_folder(tmp_path_factory.mktemp("calibration"), size=32)
    return compile_to_memory(
        conv_net(), quantize="int8", calibration=photos, mean=(127.0,) * 3, std=(128.0,) * 3
    )


def test_int8_model_runs_on_int8_kernels(int8_model) -> None:
    engine = OpenVinoBackend(parse_options(None)).load(int8_model.partitions[0], 1)
    precisions = engine.runtime_precisions("Convolution")
    assert precisions, "no Convolution in OpenVINO's runtime model"
    assert precisions <= {"i8", "u8"}, f"convolutions run in {precisions}, not int8"
    fp32 = OpenVinoBackend(parse_options(None)).load(compile_to_memory(conv_net()).partitions[0], 1)
    assert fp32.runtime_precisions("Convolution").isdisjoint({"i8", "u8"})


def test_int8_views_match_onnxruntime_within_one_step(pair, int8_model) -> None:
    ov_runner, ort_runner = pair(int8_model)
    (in_info,) = ov_runner.get_tensors_info(IN, HW)
    (out_info,) = ov_runner.get_tensors_info(OUT, HW)
    assert in_info.data_type is cl.DataType.INT8 and out_info.data_type is cl.DataType.INT8
    data = np.random.default_rng(4).integers(-128, 128, in_info.shape, dtype=np.int8)
    got = run_hw(ov_runner, data).astype(np.int32)
    expected = run_hw(ort_runner, data).astype(np.int32)
    # Different int8 kernels may round an intermediate activation differently; one step
    # there moves a few outputs by several steps. Almost all outputs are bit-identical.
    diff = np.abs(got - expected)
    assert (diff == 0).mean() > 0.9, f"{(diff > 0).mean():.1%} of the outputs differ"
    assert diff.mean() < 0.25 and diff.max() <= 16, f"mean {diff.mean()}, max {diff.max()}"


def _bad_calls(runner: Runner) -> dict[str, tuple[Any, Any]]:
    (in_info,) = runner.get_tensors_info(IN, HW)
    (out_info,) = runner.get_tensors_info(OUT, HW)
    x, y = runner.allocate_npu_tensor(in_info), runner.allocate_npu_tensor(out_info)
    other = cl.NpuTensorInfo(
        in_info.name, cl.DataType.INT8, IN, HW, in_info.memory_layout, in_info.shape
    )
    wrong_dtype = runner.allocate_npu_tensor(other)
    return {
        "good": ([[x]], [[y]]),
        "none": (None, None),
        "no inputs": ([], [[y]]),
        "input as output": ([[x]], [[x]]),
        "output as input": ([[y]], [[y]]),
        "wrong dtype": ([[wrong_dtype]], [[y]]),
        "not a tensor": ([[np.zeros(in_info.shape, np.float32)]], [[y]]),
        "too many frames": ([[x], [x]], [[y], [y]]),
    }


def test_statuses_for_bad_calls_equal_onnxruntime(pair) -> None:
    ov_runner, ort_runner = pair(compile_to_memory(conv_net()))
    statuses = []
    for runner in (ov_runner, ort_runner):
        calls = _bad_calls(runner)
        sync = {case: runner.execute(*args) for case, args in calls.items()}
        handles = {case: runner.execute_async(*args) for case, args in calls.items()}
        final = {
            case: runner.wait(h, 10_000) if h.job_id else h.status for case, h in handles.items()
        }
        statuses.append((sync, final))
    assert statuses[0] == statuses[1]
    sync, final = statuses[0]
    assert sync["good"] is final["good"] is cl.StatusCode.SUCCESS
    assert all(s is not cl.StatusCode.SUCCESS for case, s in sync.items() if case != "good")


def test_dynamic_output_is_copied_out_like_onnxruntime(pair) -> None:
    nodes = [oh.make_node("NonZero", ["input"], ["nz"]), oh.make_node("Relu", ["input"], ["r"])]
    graph = oh.make_graph(
        nodes,
        "nonzero",
        [oh.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 8])],
        [
            oh.make_tensor_value_info("nz", onnx.TensorProto.INT64, [2, "k"]),
            oh.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [1, 8]),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    compiled = compile_to_memory(model)
    assert [s.dynamic for s in compiled.outputs] == [True, False]
    results = []
    for runner in pair(compiled):
        (x,) = (runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(IN, HW))
        nz_info, r_info = runner.get_tensors_info(OUT, HW)
        # Dynamic dims read 1 in the info: the caller sizes the tensor for the worst case.
        nz_info = dataclasses.replace(nz_info, shape=(2, 8))
        outs = [runner.allocate_npu_tensor(nz_info), runner.allocate_npu_tensor(r_info)]
        for data in ([[0, 1, 0, 2, 0, 0, 3, 0]], [[1, 1, 0, 0, 0, 0, 0, 1]]):
            x.numpy()[...] = data
            outs[0].numpy()[...] = -1
            assert runner.execute([[x]], [outs]) is cl.StatusCode.SUCCESS
            results.append([o.numpy().copy() for o in outs])
            nonzero = np.count_nonzero(data)
            assert (outs[0].numpy().reshape(-1)[: 2 * nonzero] >= 0).all()
    half = len(results) // 2
    for got, expected in zip(results[:half], results[half:], strict=True):
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize(
    ("options", "hint", "num_requests"),
    [
        ({}, "LATENCY", None),
        ({"performance_hint": "throughput", "max_concurrent_runs": 3}, "THROUGHPUT", 3),
        ({"performance_hint": "AUTO", "max_concurrent_runs": 1}, "LATENCY", None),
        ({"performance_hint": "AUTO", "max_concurrent_runs": 2}, "THROUGHPUT", 2),
    ],
)
def test_options_reach_openvino(options, hint, num_requests) -> None:
    backend = OpenVinoBackend(parse_options({**options, "device": "CPU"}))
    engine = backend.load(compile_to_memory(conv_net()).partitions[0], 2)
    compiled = engine.compiled_model
    assert str(compiled.get_property("PERFORMANCE_HINT")) == hint
    assert int(compiled.get_property("INFERENCE_NUM_THREADS")) == 2
    if num_requests is not None:
        assert int(compiled.get_property("PERFORMANCE_HINT_NUM_REQUESTS")) == num_requests


@pytest.mark.parametrize(
    ("precision", "expected"),
    [(None, "f32"), ("model", "f32"), ("f32", "f32"), ("bf16", "bf16")],
)
def test_float_graphs_run_in_the_declared_precision(precision, expected) -> None:
    """Left to itself OpenVINO picks bf16 on AMX/AVX512-BF16 CPUs; copyless asks for f32.
    Asked for bf16, a CPU without bf16 arithmetic (no "BF16" among OpenVINO's optimization
    capabilities: AVX2-only machines) runs f32, and OpenVINO reports that."""
    if expected == "bf16" and "BF16" not in ov_cpu_capabilities():
        expected = "f32"
    options = {} if precision is None else {"inference_precision": precision}
    backend = OpenVinoBackend(parse_options({**options, "device": "CPU"}))
    engine = backend.load(compile_to_memory(conv_net()).partitions[0], 1)
    assert engine.compiled_model.get_property("INFERENCE_PRECISION_HINT").to_string() == expected


def test_engine_precision_is_openvinos_own_default() -> None:
    core_default = ov_core_default_precision()
    backend = OpenVinoBackend(parse_options({"inference_precision": "engine", "device": "CPU"}))
    engine = backend.load(compile_to_memory(conv_net()).partitions[0], 1)
    precision = engine.compiled_model.get_property("INFERENCE_PRECISION_HINT")
    assert precision.to_string() == core_default


def ov_cpu_capabilities() -> list[str]:
    import openvino as ov

    return [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


def ov_core_default_precision() -> str:
    import openvino as ov

    return str(ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").to_string())


@pytest.mark.parametrize("device", ["cuda", "tensorrt", "NPU", "GPU.3"])
def test_unavailable_devices_are_unsupported(device) -> None:
    with pytest.raises(cl.UnsupportedError, match=repr(device)):
        RunnerFactory.from_compiled(compile_to_memory(conv_net()), {"device": device}, OV)


def test_missing_openvino_says_how_to_install(tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['openvino'] = None\n"  # import openvino -> ImportError
        "import copyless as cl\n"
        "from copyless.model import compile_to_memory\n"
        "from onnx import load\n"
        f"compiled = compile_to_memory(load({str(tmp_path / 'm.onnx')!r}))\n"
        "try:\n"
        "    cl.RunnerFactory.from_compiled(compiled, None, cl.RunnerType.OPENVINO)\n"
        "except cl.UnsupportedError as exc:\n"
        "    print('UNSUPPORTED', exc)\n"
        "print('ORT', cl.RunnerFactory.from_compiled(compiled).get_property('backend'))\n"
    )
    onnx.save(conv_net(), tmp_path / "m.onnx")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert "UNSUPPORTED" in done.stdout and "pip install copyless[openvino]" in done.stdout
    assert "ORT onnxruntime" in done.stdout  # the default backend does not need openvino
