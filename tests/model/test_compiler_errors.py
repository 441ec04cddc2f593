"""What the compiler accepts and refuses: every DataType compiles and runs, anything else is
an UnsupportedError naming the tensor; unreadable models are ModelLoadError."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from compiler_support import conv_net, run_compiled
from onnx import TensorProto, helper

from copyless.model import compile_model, compile_to_memory
from copyless.model._graph import ELEM_OF
from copyless.types import DataType, ModelLoadError, OptionError, UnsupportedError


def identity(elem: int, shape: list[int | str] | None = None) -> onnx.ModelProto:
    shape = [2, 3] if shape is None else shape
    graph = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["b"])],
        "ident",
        [helper.make_tensor_value_info("a", elem, shape)],
        [helper.make_tensor_value_info("b", elem, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("dtype", list(ELEM_OF), ids=lambda d: d.name)
def test_every_datatype_compiles_and_runs(dtype: DataType) -> None:
    compiled = compile_to_memory(identity(ELEM_OF[dtype]))
    spec = compiled.inputs[0]
    assert spec.cpu.data_type is dtype and spec.hw.data_type is dtype
    values = (
        np.arange(6).reshape(2, 3) % 2 if dtype is DataType.BOOLEAN else np.arange(6).reshape(2, 3)
    )
    a = values.astype(dtype.to_numpy())
    got = run_compiled(compiled, {"a": a})["b"]
    if dtype is DataType.BF16:  # compare bits: numpy cannot compare bfloat16 arrays directly
        np.testing.assert_array_equal(got.view(np.uint16), a.view(np.uint16))
        assert got.dtype == ml_dtypes.bfloat16
    else:
        np.testing.assert_array_equal(got, a)


@pytest.mark.parametrize("elem", [TensorProto.DOUBLE, TensorProto.STRING, TensorProto.COMPLEX64])
def test_unsupported_dtype_names_the_tensor(elem: int) -> None:
    with pytest.raises(UnsupportedError, match=r"input 'a' has element type"):
        compile_to_memory(identity(elem))


def test_double_output_names_the_tensor() -> None:
    model = identity(TensorProto.FLOAT)
    model.graph.node[0].op_type = "Cast"
    model.graph.node[0].attribute.append(helper.make_attribute("to", TensorProto.DOUBLE))
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    with pytest.raises(UnsupportedError, match=r"output 'b'.*DOUBLE"):
        compile_to_memory(model)


def test_sequence_input_is_unsupported() -> None:
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("SequenceLength", ["s"], ["n"])],
        "seq",
        [seq],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedError, match=r"input 's' is a sequence_type"):
        compile_to_memory(model)


def test_symbolic_non_batch_dim_needs_input_shapes() -> None:
    model = identity(TensorProto.FLOAT, ["N", "L"])
    with pytest.raises(UnsupportedError, match=r"input 'a' dim 1 \('L'\) is symbolic"):
        compile_to_memory(model)
    compiled = compile_to_memory(model, input_shapes={"a": (4, 7)})
    assert compiled.inputs[0].cpu.shape == (4, 7) and compiled.outputs[0].cpu.shape == (4, 7)
    with pytest.raises(UnsupportedError, match="not an input"):
        compile_to_memory(model, input_shapes={"zz": (1, 2)})


def test_fixed_batch_model_refuses_another_batch() -> None:
    with pytest.raises(UnsupportedError, match="fixed batch dim"):
        compile_to_memory(conv_net(batch=1), batch_size=4)


def test_unreadable_models(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="cannot read"):
        compile_model(tmp_path / "missing.onnx", tmp_path / "out.rai")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\x00 definitely not protobuf" * 10)
    with pytest.raises(ModelLoadError):
        compile_model(garbage, tmp_path / "out.rai")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadError):
        compile_model(empty, tmp_path / "out.rai")


def test_model_onnxruntime_rejects_is_unsupported() -> None:
    model = identity(TensorProto.FLOAT)
    model.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(UnsupportedError, match="onnxruntime cannot load"):
        compile_to_memory(model)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"bogus": 1}, OptionError, "unknown compiler option"),
        ({"batch_size": 0}, OptionError, "batch_size"),
        ({"input_layout": "NOPE"}, OptionError, "unknown memory layout"),
        ({"input_dtype": "int8"}, OptionError, "INT8 with precision='int8'"),
        ({"input_layout": "HCWNC4", "input_format": "rgbx"}, OptionError, "drop input_layout"),
        ({"output_layout": {"nope": "NHWC"}}, OptionError, "not among"),
        ({"output_layout": {"probs": "NHWC"}}, OptionError, "no NHWC view"),
        ({"mean": (1, 2)}, OptionError, "three"),
        ({"std": (1, 0, 1)}, OptionError, "three finite numbers > 0"),
        ({"quantize": "int4", "calibration": "."}, OptionError, "int8"),
    ],
)
def test_bad_options(options: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        compile_to_memory(conv_net(), **options)


def test_rgbx_needs_three_channels() -> None:
    model = identity(TensorProto.FLOAT, [1, 1, 4, 4])
    with pytest.raises(UnsupportedError, match="rgbx"):
        compile_to_memory(model, input_format="rgbx")
