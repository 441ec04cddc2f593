"""Data-dependent outputs at the engine-context level, on ONNX Runtime and OpenVINO:
results land C-contiguously at the start of the caller's memory, produced shapes change
from run to run, a too-small buffer is reported by its shape and the context goes on."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import onnx
import onnx.helper as oh
import pytest

import copyless as cl
from copyless.backends._base import Engine
from copyless.backends._onnxruntime import OrtCpuBackend
from copyless.backends._openvino import OpenVinoBackend, OvContext
from copyless.model import Partition
from copyless.runner._options import parse_options
from model_helpers import nonzero_net, with_nonzeros

I64, F32 = cl.DataType.INT64, cl.DataType.FLOAT32


def _model(nodes, inputs, outputs) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "g", inputs, outputs)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _load(backend: str, model: onnx.ModelProto) -> Engine:
    inputs = tuple(i.name for i in model.graph.input)
    outputs = tuple(o.name for o in model.graph.output)
    part = Partition("par_0", "npu", model.SerializeToString(), inputs, outputs)
    if backend == "onnxruntime":
        return OrtCpuBackend().load(part, 1)
    return OpenVinoBackend(parse_options({"device": "CPU"})).load(part, 1)


def nonzero_model(rank_known: bool = True) -> onnx.ModelProto:
    """x [3,4] -> nz = NonZero(x) and r = Relu(x) (a fixed output beside it)."""
    return nonzero_net(declared=[2, "k"] if rank_known else None)


@pytest.fixture(params=["onnxruntime", "openvino"])
def engine(request: pytest.FixtureRequest) -> Callable[[onnx.ModelProto], Engine]:
    engines: list[Engine] = []

    def make(model: onnx.ModelProto) -> Engine:
        engines.append(_load(request.param, model))
        return engines[-1]

    yield make
    for e in engines:
        e.close()


@pytest.mark.parametrize("capacity", [(2, 12), (2, 30), (24,)], ids=["exact", "larger", "flat"])
def test_changing_shapes_land_at_the_start_of_the_buffer(engine, capacity) -> None:
    context = engine(nonzero_model()).new_context()
    x = np.zeros((3, 4), np.float32)
    r = np.zeros((3, 4), np.float32)
    out = np.full(int(np.prod(capacity)), -7, np.int64)
    context.bind_input("x", x.ctypes.data, F32, x.shape)
    context.bind_output("r", r.ctypes.data, F32, r.shape)
    context.bind_output_dynamic("nz", out.ctypes.data, I64, capacity)
    for step, count in enumerate((3, 3, 5, 1, 12, 0, 7)):
        with_nonzeros(x, count, step)
        out[:] = -7
        context.run()
        assert context.produced_shape("nz") == (2, count)
        expected = np.stack(np.nonzero(x))
        np.testing.assert_array_equal(out[: 2 * count].reshape(2, count), expected)
        assert (out[2 * count :] == -7).all(), "bytes past the result were written"
        np.testing.assert_array_equal(r, x)
    context.close()


def test_too_small_reports_the_shape_and_the_context_goes_on(engine) -> None:
    context = engine(nonzero_model()).new_context()
    x = np.zeros((3, 4), np.float32)
    r = np.zeros((3, 4), np.float32)
    small = np.full((2, 4), -7, np.int64)
    context.bind_input("x", x.ctypes.data, F32, x.shape)
    context.bind_output("r", r.ctypes.data, F32, r.shape)
    context.bind_output_dynamic("nz", small.ctypes.data, I64, small.shape)
    for step, count in enumerate((2, 9, 4, 11, 1)):
        with_nonzeros(x, count, step)
        context.run()  # never raises for a result that does not fit
        assert context.produced_shape("nz") == (2, count)
        np.testing.assert_array_equal(r, x)  # the fixed output is written either way
        if count <= 4:
            got = small.reshape(-1)[: 2 * count].reshape(2, count)
            np.testing.assert_array_equal(got, np.stack(np.nonzero(x)))
    context.close()


def test_unknown_rank_output_fills_a_flat_capacity(engine) -> None:
    context = engine(nonzero_model(rank_known=False)).new_context()
    x = np.zeros((3, 4), np.float32)
    r = np.zeros((3, 4), np.float32)
    out = np.full(40, -7, np.int64)
    context.bind_input("x", x.ctypes.data, F32, x.shape)
    context.bind_output("r", r.ctypes.data, F32, r.shape)
    context.bind_output_dynamic("nz", out.ctypes.data, I64, out.shape)
    for step, count in enumerate((6, 2, 12)):
        with_nonzeros(x, count, step)
        context.run()
        assert context.produced_shape("nz") == (2, count)
        np.testing.assert_array_equal(out[: 2 * count].reshape(2, count), np.stack(np.nonzero(x)))
    context.close()


def test_fixed_binding_after_a_dynamic_one(engine) -> None:
    context = engine(nonzero_model()).new_context()
    x = np.array([[0, 2, 0, 3], [0, 0, 0, 0], [1, 0, 0, 0]], np.float32)
    r = np.zeros((3, 4), np.float32)
    dynamic = np.zeros(24, np.int64)
    context.bind_input("x", x.ctypes.data, F32, x.shape)
    context.bind_output("r", r.ctypes.data, F32, r.shape)
    context.bind_output_dynamic("nz", dynamic.ctypes.data, I64, (2, 12))
    context.run()
    fixed = np.full((2, 3), -1, np.int64)  # the caller knows there will be 3
    context.bind_output("nz", fixed.ctypes.data, I64, fixed.shape)
    dynamic[:] = -5
    context.run()
    np.testing.assert_array_equal(fixed, np.stack(np.nonzero(x)))
    assert (dynamic == -5).all(), "the earlier dynamic binding was still written"
    context.close()


def test_bf16_dynamic_output_keeps_its_bytes(engine) -> None:
    model = _model(
        [
            oh.make_node("Cast", ["x"], ["f"], to=onnx.TensorProto.FLOAT),
            oh.make_node("Relu", ["f"], ["y"]),
            oh.make_node("Compress", ["y", "keep"], ["c"], axis=1),
            oh.make_node("Cast", ["c"], ["z"], to=onnx.TensorProto.BFLOAT16),
        ],
        [
            oh.make_tensor_value_info("x", onnx.TensorProto.BFLOAT16, [2, 3]),
            oh.make_tensor_value_info("keep", onnx.TensorProto.BOOL, [3]),
        ],
        [oh.make_tensor_value_info("z", onnx.TensorProto.BFLOAT16, [2, "k"])],
    )
    context = engine(model).new_context()
    x = np.array([[1.5, -2, 3], [0, 5.25, -1]], ml_dtypes.bfloat16)
    keep = np.array([True, False, True])
    z = np.zeros(6, ml_dtypes.bfloat16)
    context.bind_input("x", x.ctypes.data, cl.DataType.BF16, x.shape)
    context.bind_input("keep", keep.ctypes.data, cl.DataType.BOOLEAN, keep.shape)
    context.bind_output_dynamic("z", z.ctypes.data, cl.DataType.BF16, (2, 3))
    context.run()
    assert context.produced_shape("z") == (2, 2)
    expected = np.maximum(x.astype(np.float32), 0)[:, keep]
    np.testing.assert_array_equal(z[:4].reshape(2, 2).astype(np.float32), expected)


def test_openvino_writes_in_place_within_the_ports_bound() -> None:
    """OpenVINO's own output tensor is the caller's memory: no copy is made."""
    engine = _load("openvino", nonzero_model())
    context = engine.new_context()
    assert isinstance(context, OvContext)
    x = np.zeros((3, 4), np.float32)
    r = np.zeros((3, 4), np.float32)
    out = np.zeros(64, np.int64)  # more than NonZero's bound [2,..12]
    context.bind_input("x", x.ctypes.data, F32, x.shape)
    context.bind_output("r", r.ctypes.data, F32, r.shape)
    context.bind_output_dynamic("nz", out.ctypes.data, I64, (2, 32))
    with_nonzeros(x, 5, 0)
    context.run()
    port = engine.output_names.index("nz")
    tensor = context.request.get_output_tensor(port)
    assert tuple(tensor.shape) == (2, 5)
    assert tensor.data.ctypes.data == out.ctypes.data
    # Below the port's bound the result is copied: OpenVINO's tensor is its own.
    small = np.zeros((2, 6), np.int64)
    context.bind_output_dynamic("nz", small.ctypes.data, I64, small.shape)
    context.run()
    assert context.request.get_output_tensor(port).data.ctypes.data != small.ctypes.data
    np.testing.assert_array_equal(small.reshape(-1)[:10].reshape(2, 5), np.stack(np.nonzero(x)))
    context.close()
    engine.close()
