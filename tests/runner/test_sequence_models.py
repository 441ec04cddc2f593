"""Models with sequence-typed values inside the graph and tensor outputs: compiled with the
shapes their outputs really have, and run through the Runner as onnxruntime runs them."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper
from runner_helpers import reference

import copyless as cl
from copyless.model import compile_to_memory

IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=None) -> onnx.ModelProto:
    graph = oh.make_graph(
        nodes,
        "sequences",
        [oh.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [oh.make_tensor_value_info(n, t, None) for n, t in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def n(op, ins, outs, **attrs):
    return oh.make_node(op, ins, outs, **attrs)


AB = [("a", F, [2, 3]), ("b", F, [4, 3])]

#: name -> (model, the output shapes the compiler must report: static where exact)
MODELS = {
    "construct-concat": (
        _model([n("SequenceConstruct", ["a", "b"], ["s"]),
                n("ConcatFromSequence", ["s"], ["y"], axis=0)], AB, [("y", F)]),
        {"y": (6, 3)},
    ),
    "split-at": (
        _model([n("SplitToSequence", ["b"], ["s"], axis=1),
                n("SequenceAt", ["s", "i"], ["y"])], AB[1:], [("y", F)],
               {"i": np.array(-1, np.int64)}),
        {"y": (4, 1)},
    ),
    "split-length-stack": (
        _model([n("SplitToSequence", ["b", "k"], ["s"], axis=0),
                n("SequenceLength", ["s"], ["count"]),
                n("ConcatFromSequence", ["s"], ["y"], axis=1, new_axis=1)],
               AB[1:], [("count", I64), ("y", F)], {"k": np.array(2, np.int64)}),
        {"count": (), "y": (2, 2, 3)},
    ),
    "insert-erase": (
        _model([n("SequenceEmpty", [], ["e"], dtype=F),
                n("SequenceInsert", ["e", "a"], ["s1"]),
                n("SequenceInsert", ["s1", "b", "zero"], ["s2"]),
                n("SequenceInsert", ["s2", "a"], ["s3"]),
                n("SequenceErase", ["s3", "last"], ["s4"]),
                n("ConcatFromSequence", ["s4"], ["y"], axis=0),
                n("SequenceLength", ["s4"], ["count"])],
               AB, [("y", F), ("count", I64)],
               {"zero": np.array(0, np.int64), "last": np.array(-1, np.int64)}),
        {"y": (6, 3), "count": ()},
    ),
    "data-dependent-pieces": (
        _model([n("NonZero", ["a"], ["nz"]),
                n("SplitToSequence", ["nz"], ["s"], axis=1, keepdims=0),
                n("ConcatFromSequence", ["s"], ["y"], axis=0)],
               AB[:1], [("y", I64)]),
        {"y": (12,)},
    ),
}  # fmt: skip


def _feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        values = rng.standard_normal(shape).astype(np.float32)
        feeds[vi.name] = np.where(rng.random(shape) < 0.5, values, 0).astype(np.float32)
    return feeds


def _refused_by_openvino(name: str, runner_type: cl.RunnerType, make) -> bool:
    """OpenVINO 2026.4 converts sequences of a static structure only: a sequence whose
    length depends on the data is refused at load, by name, never at run time."""
    if name != "data-dependent-pieces" or runner_type is not cl.RunnerType.OPENVINO:
        return False
    with pytest.raises(cl.UnsupportedError, match="SplitToSequence"):
        make()
    return True


@pytest.mark.parametrize("name", list(MODELS))
def test_sequence_model_runs_as_onnxruntime_runs_it(name, make_runner, runner_type) -> None:
    source, shapes = MODELS[name]
    compiled = compile_to_memory(source)
    assert {s.name: s.cpu.shape for s in compiled.outputs} == shapes
    if _refused_by_openvino(name, runner_type, lambda: make_runner(compiled)):
        return
    runner = make_runner(compiled)
    inputs = [runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(IN)]
    outputs = [runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(OUT)]
    for seed in range(4):
        feeds = _feeds(source, seed)
        for tensor in inputs:
            tensor.numpy()[...] = feeds[tensor.info.name]
        assert runner.execute([inputs], [outputs]) is cl.StatusCode.SUCCESS
        for tensor, want in zip(outputs, reference(source, feeds), strict=True):
            got = tensor.numpy()
            if tensor.produced_shape is not None:  # data-dependent: the start of the buffer
                got = got.reshape(-1)[: want.size].reshape(tensor.produced_shape)
            np.testing.assert_array_equal(got, want)


def test_dynamic_sequence_async_in_flight(make_runner, runner_type) -> None:
    source, _ = MODELS["data-dependent-pieces"]
    compiled = compile_to_memory(source)
    if _refused_by_openvino("data-dependent-pieces", runner_type, lambda: make_runner(compiled)):
        return
    runner = make_runner(compiled, max_concurrent_runs=3)
    jobs = []
    for seed in range(3):
        x = runner.allocate_npu_tensor(runner.get_tensors_info(IN)[0])
        info = runner.get_tensors_info(OUT)[0]
        y = runner.allocate_npu_tensor(dataclasses.replace(info, shape=(12,)))
        feeds = _feeds(source, 10 + seed)
        x.numpy()[...] = feeds["a"]
        jobs.append((runner.execute_async([[x]], [[y]]), y, reference(source, feeds)[0]))
    for handle, y, want in jobs:
        assert runner.wait(handle, 10_000) is cl.StatusCode.SUCCESS
        assert y.produced_shape == want.shape
        np.testing.assert_array_equal(y.numpy()[: want.size], want)
