"""onnx's own backend test cases for the ops whose output shape depends on the data
(NonZero, NonMaxSuppression, TopK, Compress, Unique, Range, Expand, ConstantOfShape, OneHot,
Tile), compiled and run through the Runner on each CPU backend: results and produced shapes
equal onnx's expected outputs. Cases with sequence inputs or outputs are left out (copyless
models have tensor inputs and outputs; sequences inside a graph: test_sequence_models.py)."""

from __future__ import annotations

import dataclasses
import importlib
import warnings

import numpy as np
import pytest

import copyless as cl
from copyless.model import CompiledModel, compile_to_memory

IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
PREFIXES = (
    "test_nonzero", "test_nonmaxsuppression", "test_top_k", "test_compress", "test_unique",
    "test_range", "test_expand_dim", "test_constantofshape", "test_onehot", "test_tile",
)  # fmt: skip

MODULES = (
    "nonzero", "nonmaxsuppression", "topk", "compress", "unique", "rangeop", "expand",
    "constantofshape", "onehot", "tile",
)  # fmt: skip

#: Cases where OpenVINO 2026.4 itself differs from onnx's expected outputs (its own API
#: gives the same): copyless must still run them and report the shape OpenVINO produced.
#: (TopK's ties are in onnx's order: the backend sets OpenVINO's ``stable``.)
OPENVINO_DIFFERS = {
    "test_nonmaxsuppression_iou_threshold_boundary": "keeps 1 box where onnx keeps 2",
}
#: Cases OpenVINO would answer wrongly whatever the data: the OpenVINO backend refuses them.
OPENVINO_REFUSES = {
    "test_tile": "Tile by repeats from an input returns uninitialised memory",
    "test_tile_precomputed": "the same graph (OpenVINO happened to be right on this one)",
}


def _collect() -> dict[str, object]:
    """The cases of those ops only: importing an op's case module runs its generators
    (onnx.backend.test.case.node.collect_testcases would run all of them, ~10 s)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators divide by zero on purpose
        from onnx.backend.test.case import node

        for module in MODULES:
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
    chosen = {}
    for case in node._NodeTestCases:
        graph = case.model.graph
        values = [*graph.input, *graph.output]
        tensors_only = all(vi.type.HasField("tensor_type") for vi in values)
        if case.name.startswith(PREFIXES) and tensors_only:
            chosen[case.name] = case
    return chosen


CASES = _collect()


@pytest.fixture(scope="module")
def compiled() -> dict[str, CompiledModel | Exception]:
    out: dict[str, CompiledModel | Exception] = {}
    for name, case in CASES.items():
        try:
            out[name] = compile_to_memory(case.model)  # type: ignore[attr-defined]
        except cl.UnsupportedError as exc:
            out[name] = exc
    return out


def test_the_sample_covers_every_op() -> None:
    assert len(CASES) >= 40
    for prefix in PREFIXES:
        assert any(name.startswith(prefix) for name in CASES), prefix


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case_through_the_runner(name, compiled, make_runner, runner_type) -> None:
    case = CASES[name]
    model = compiled[name]
    if isinstance(model, Exception):  # onnxruntime itself lacks the kernel (TopK on uint64)
        assert isinstance(model, cl.UnsupportedError) and "onnxruntime" in str(model)
        return
    if runner_type is cl.RunnerType.OPENVINO and name in OPENVINO_REFUSES:
        with pytest.raises(cl.UnsupportedError, match="answers would be wrong"):
            make_runner(model)
        return
    runner = make_runner(model)
    inputs, expected = case.data_sets[0]  # type: ignore[attr-defined]
    in_tensors = [runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(IN)]
    for tensor, value in zip(in_tensors, inputs, strict=True):
        tensor.numpy()[...] = value
    out_tensors = []
    for spec, want in zip(model.outputs, expected, strict=True):
        info = runner.get_tensor_info_by_name(spec.name)
        if spec.dynamic:  # room for the result: the derived capacity, or what it needs
            if len(info.shape) != np.ndim(want):  # unknown rank: a flat capacity
                assert info.shape == (-1,)
                info = dataclasses.replace(info, shape=(np.size(want),))
            dims = zip(info.shape, np.shape(want), strict=True)
            info = dataclasses.replace(info, shape=tuple(w if c == -1 else c for c, w in dims))
            assert all(c >= w for c, w in zip(info.shape, np.shape(want), strict=True))
        out_tensors.append(runner.allocate_npu_tensor(info))
    assert runner.execute([in_tensors], [out_tensors]) is cl.StatusCode.SUCCESS
    if runner_type is cl.RunnerType.OPENVINO and name in OPENVINO_DIFFERS:
        for tensor in out_tensors:  # the shape OpenVINO produced, within the capacity
            shape = tensor.produced_shape or tensor.info.shape
            assert int(np.prod(shape)) <= tensor.info.size
        return
    tol = {"rtol": max(case.rtol, 1e-5), "atol": max(case.atol, 1e-6)}  # type: ignore[attr-defined]
    for tensor, want in zip(out_tensors, expected, strict=True):
        got = tensor.numpy()
        if tensor.produced_shape is not None:
            assert tensor.produced_shape == np.shape(want)
            got = got.reshape(-1)[: np.size(want)].reshape(np.shape(want))
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), **tol)
