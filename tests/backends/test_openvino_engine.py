"""OpenVINO engine contexts: binding by address without copies, the GIL (data-dependent
outputs: tests/backends/test_dynamic_contexts.py)."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import onnxruntime as ort
import pytest

import copyless as cl
from copyless.backends._openvino import OpenVinoBackend, OvEngine
from copyless.model import Partition
from copyless.runner._options import parse_options

F32 = cl.DataType.FLOAT32


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def conv_model(size: int = 16, features: int = 8) -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((features, 3, 3, 3)).astype(np.float32)
    return _model(
        [
            oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            oh.make_node("Relu", ["c"], ["y"]),
        ],
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, size, size])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, features, size, size])],
        [onh.from_array(w * 0.2, "w")],
    )


def engine_for(model: onnx.ModelProto, threads: int = 2, **options: object) -> OvEngine:
    inputs = tuple(i.name for i in model.graph.input)
    outputs = tuple(o.name for o in model.graph.output)
    part = Partition("par_0", "npu", model.SerializeToString(), inputs, outputs)
    return OpenVinoBackend(parse_options(options)).load(part, threads)


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


def test_inputs_and_outputs_are_the_callers_memory() -> None:
    model = conv_model()
    engine = engine_for(model)
    assert engine.input_names == ("x",) and engine.output_names == ("y",)
    context = engine.new_context()
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    y = np.full((1, 8, 16, 16), np.nan, np.float32)
    context.bind_input("x", x.ctypes.data, F32, x.shape)
    context.bind_output("y", y.ctypes.data, F32, y.shape)
    context.run()
    (expected,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    # OpenVINO's own view of its tensors is the caller's memory, not a copy of it.
    bound_in = context.request.get_input_tensor(0).data
    bound_out = context.request.get_output_tensor(0).data
    assert bound_in.ctypes.data == x.ctypes.data and np.shares_memory(bound_in, x)
    assert bound_out.ctypes.data == y.ctypes.data and np.shares_memory(bound_out, y)
    # New data in the same buffer is seen by the next run: nothing was staged.
    x *= -1.0
    context.run()
    (expected,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    context.close()
    engine.close()


def test_rebinds_only_when_the_address_changes() -> None:
    engine = engine_for(conv_model())
    context = engine.new_context()
    x1, x2 = np.ones((2, 1, 3, 16, 16), np.float32)
    y = np.zeros((1, 8, 16, 16), np.float32)
    context.bind_output("y", y.ctypes.data, F32, y.shape)
    context.bind_input("x", x1.ctypes.data, F32, x1.shape)
    first = context.request.get_input_tensor(0)
    context.bind_input("x", x1.ctypes.data, F32, x1.shape)
    assert context.request.get_input_tensor(0).data.ctypes.data == x1.ctypes.data
    context.bind_input("x", x2.ctypes.data, F32, x2.shape)
    assert context.request.get_input_tensor(0).data.ctypes.data == x2.ctypes.data
    assert first.data.ctypes.data == x1.ctypes.data
    context.close()


def test_infer_releases_the_gil() -> None:
    model = conv_model(size=224, features=64)
    engine = engine_for(model, threads=1)
    context = engine.new_context()
    x = np.ones((1, 3, 224, 224), np.float32)
    y = np.zeros((1, 64, 224, 224), np.float32)
    context.bind_input("x", x.ctypes.data, F32, x.shape)
    context.bind_output("y", y.ctypes.data, F32, y.shape)
    context.run()  # warm
    started, done = threading.Event(), threading.Event()

    def infer() -> None:
        started.set()
        for _ in range(3):
            context.run()
        done.set()

    worker = threading.Thread(target=infer)
    worker.start()
    started.wait()
    t0, spins = time.perf_counter(), 0
    while not done.is_set():
        spins += 1
    elapsed = time.perf_counter() - t0
    worker.join()
    # Holding the GIL in infer would freeze this loop for the whole inference.
    assert elapsed > 0.005, "inference too short to tell"
    assert spins > 1000, f"{spins} Python iterations in {elapsed * 1e3:.1f} ms of inference"


def test_unreadable_graph_and_unknown_names_fail_to_load() -> None:
    backend = OpenVinoBackend(parse_options(None))
    with pytest.raises(cl.ModelLoadError, match="par_0"):
        backend.load(Partition("par_0", "npu", b"not an onnx graph", ("x",), ("y",)), 1)
    good = conv_model().SerializeToString()
    with pytest.raises(cl.ModelLoadError, match="'missing'"):
        backend.load(Partition("par_0", "npu", good, ("missing",), ("y",)), 1)
