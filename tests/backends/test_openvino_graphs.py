"""Graphs OpenVINO's ONNX reader changes under the Runner, found by the ONNX node tests
(``python benchmarks/node_conformance.py``): outputs that pass an input through, inputs it drops or
renames, outputs it fixes that the compiler could not, TopK's ties; and the graphs OpenVINO
would answer wrongly, refused in one line. Each runs on both engines: onnxruntime's answer
is the reference, and OpenVINO must equal it or refuse, never answer otherwise."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

import copyless as cl
from copyless.model import compile_to_memory
from copyless.runner import Runner, RunnerFactory

pytest.importorskip("openvino")
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
OV, ORT = cl.RunnerType.OPENVINO, cl.RunnerType.ONNXRUNTIME
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 17,
           inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:  # fmt: skip
    graph = oh.make_graph(
        nodes, "g",
        [oh.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [oh.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _run(model: onnx.ModelProto, feeds: list[np.ndarray], engine: cl.RunnerType,
         made: list[Runner], **options: Any) -> list[np.ndarray]:  # fmt: skip
    """Execute once through a Runner on ``engine``; the outputs (at their produced shape)."""
    compiled = compile_to_memory(model)
    runner = RunnerFactory.from_compiled(compiled, options, engine)
    made.append(runner)
    ins = [runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(IN)]
    for tensor, value in zip(ins, feeds, strict=True):
        tensor.numpy()[...] = value
    outs = []
    for spec in compiled.outputs:
        info = runner.get_tensor_info_by_name(spec.name)
        if -1 in info.shape:
            info = dataclasses.replace(info, shape=(64,))
        outs.append(runner.allocate_npu_tensor(info))
    assert runner.execute([ins], [outs]) is cl.StatusCode.SUCCESS
    got = []
    for tensor in outs:
        got.append(tensor.produced().copy())
    return got


def _same_on_both(model: onnx.ModelProto, feeds: list[np.ndarray], made: list[Runner]) -> None:
    want = _run(model, feeds, ORT, made)
    got = _run(model, feeds, OV, made)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


X = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.0


@pytest.mark.parametrize(
    "node",
    [
        oh.make_node("Identity", ["x"], ["y"]),
        oh.make_node("Dropout", ["x"], ["y"]),  # OpenVINO renames the input after the output
        oh.make_node("Max", ["x"], ["y"]),  # the Parameter carries both names
        oh.make_node("Sum", ["x"], ["y"]),
    ],
    ids=lambda n: n.op_type,
)
def test_an_output_that_passes_an_input_through(node: Any, runners: list[Runner]) -> None:
    """OpenVINO connects the output to the input and writes nothing into the output tensor:
    the context copies the input there, on every run (the fast path included)."""
    model = _model([node], [("x", F, [3, 4])], [("y", F, [3, 4])])
    _same_on_both(model, [X], runners)
    runner = runners[-1]
    x, y = (runner.allocate_npu_tensor(runner.get_tensors_info(d)[0]) for d in (IN, OUT))
    for k in range(3):  # the same tensors again: the replayed plan copies too
        x.numpy()[...] = X * k
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
        np.testing.assert_array_equal(y.numpy(), X * k)


def test_a_pass_through_beside_a_computed_output_async(runners: list[Runner]) -> None:
    """OpenVINO's own async requests (native_async) end with the copy too."""
    model = _model(
        [oh.make_node("Identity", ["x"], ["same"]), oh.make_node("Neg", ["x"], ["neg"])],
        [("x", F, [3, 4])],
        [("same", F, [3, 4]), ("neg", F, [3, 4])],
    )
    runner = RunnerFactory.from_compiled(compile_to_memory(model), {"native_async": True}, OV)
    runners.append(runner)
    x = runner.allocate_npu_tensor(runner.get_tensors_info(IN)[0])
    same, neg = (runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(OUT))
    x.numpy()[...] = X
    job = runner.execute_async([[x]], [[same, neg]])
    assert runner.wait(job, 10_000) is cl.StatusCode.SUCCESS
    np.testing.assert_array_equal(same.numpy(), X)
    np.testing.assert_array_equal(neg.numpy(), -X)


def test_an_input_no_node_reads(runners: list[Runner]) -> None:
    model = _model([oh.make_node("Neg", ["x"], ["y"])],
                   [("x", F, [3, 4]), ("unused", F, [2])], [("y", F, [3, 4])])  # fmt: skip
    _same_on_both(model, [X, np.ones(2, np.float32)], runners)


def test_an_empty_axes_input_and_an_output_openvino_fixes(runners: list[Runner]) -> None:
    """ReduceSum over empty ``axes`` (an input of no element): OpenVINO drops the input and
    fixes the output's shape, which the compiler leaves open: both still bind and run."""
    node = oh.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)
    model = _model([node], [("x", F, [3, 4]), ("axes", I64, [0])], [("y", F, None)], opset=18)
    _same_on_both(model, [X, np.zeros(0, np.int64)], runners)


def test_topk_keeps_ties_in_index_order(runners: list[Runner]) -> None:
    """OpenVINO's TopK is unstable unless told: the backend sets ``stable``."""
    node = oh.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1)
    model = _model([node], [("x", I64, [3, 4]), ("k", I64, [1])],
                   [("values", I64, [3, 3]), ("indices", I64, [3, 3])])  # fmt: skip
    ties = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 1, 1]], np.int64)
    k = np.array([3], np.int64)
    _same_on_both(model, [ties, k], runners)
    assert _run(model, [ties, k], OV, runners)[1].tolist() == [[0, 1, 2]] * 3


def test_an_input_openvino_ignores_is_refused(runners: list[Runner]) -> None:
    """LSTM's peepholes: OpenVINO's conversion drops ``P``, so its answers would be wrong."""
    h = 3
    node = oh.make_node("LSTM", ["x", "w", "r", "b", "", "", "", "p"], ["", "y_h"],
                        hidden_size=h)  # fmt: skip
    model = _model(
        [node],
        [("x", F, [1, 2, 4]), ("w", F, [1, 4 * h, 4]), ("r", F, [1, 4 * h, h]),
         ("b", F, [1, 8 * h]), ("p", F, [1, 3 * h])],
        [("y_h", F, [1, 2, h])],
    )  # fmt: skip
    with pytest.raises(cl.UnsupportedError, match=r"OpenVINO ignores input 'p' of LSTM"):
        RunnerFactory.from_compiled(compile_to_memory(model), None, OV)
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal(s).astype(np.float32)
             for s in ((1, 2, 4), (1, 12, 4), (1, 12, 3), (1, 24), (1, 9))]  # fmt: skip
    assert _run(model, feeds, ORT, runners)[0].shape == (1, 2, h)


WRONG = {
    "resize-antialias": (
        oh.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", antialias=1),
        {"scales": np.array([1, 1, 0.5, 0.5], np.float32)}, [1, 1, 4, 4], [1, 1, 2, 2], F, 18,
    ),
    "space-to-depth-crd": (
        oh.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2, mode="CRD"),
        {}, [1, 2, 4, 4], [1, 8, 2, 2], F, 28,
    ),
    "reduce-max-empty": (
        oh.make_node("ReduceMax", ["x"], ["y"], keepdims=1),
        {}, [2, 0, 4], [1, 1, 1], F, 18,
    ),
    "bitshift-int8": (
        oh.make_node("BitShift", ["x", "s"], ["y"], direction="RIGHT"),
        {"s": np.array([1], np.int8)}, [4], [4], TensorProto.INT8, 28,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_graph_openvino_answers_wrongly_is_refused(case: str) -> None:
    node, inits, in_shape, out_shape, dtype, opset = WRONG[case]
    model = _model([node], [("x", dtype, in_shape)], [("y", dtype, out_shape)], opset, inits)
    compiled = compile_to_memory(model)
    with pytest.raises(cl.UnsupportedError) as caught:
        RunnerFactory.from_compiled(compiled, None, OV)
    assert "answers would be wrong" in str(caught.value) and node.op_type in str(caught.value)
    assert "\n" not in str(caught.value)
    with RunnerFactory.from_compiled(compiled, None, ORT):
        pass  # onnxruntime runs it


def test_an_op_openvino_lacks_is_named_in_one_line() -> None:
    model = _model([oh.make_node("Det", ["x"], ["y"])], [("x", F, [3, 3])], [("y", F, [])], 22)
    with pytest.raises(cl.UnsupportedError) as caught:
        RunnerFactory.from_compiled(compile_to_memory(model), None, OV)
    message = str(caught.value)
    assert "No conversion rule found for operations: Det" in message and "\n" not in message
