"""CPU partitions: par_0 (npu) + par_1 (cpu) give the outputs of the unpartitioned model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from compiler_support import conv_net, from_hw, run_compiled, run_source, to_hw

from copyless.model import compile_model, load_model
from copyless.types import OptionError

SPLITS: list[tuple[dict[str, Any], set[str]]] = [
    ({"cpu_ops": ("Softmax",)}, {"softmax"}),
    ({"cpu_ops": "Gemm,Softmax"}, {"fc", "softmax"}),
    ({"cpu_partition_after": "relu1"}, {"conv2", "relu2", "gap", "flatten", "fc", "softmax"}),
    ({"cpu_partition_after": "gap"}, {"flatten", "fc", "softmax"}),  # a tensor name
    ({"cpu_tail": True}, {"relu2", "gap", "flatten", "fc", "softmax"}),
]


def _node_names(data: bytes) -> set[str]:
    return {n.name for n in onnx.load_from_string(data).graph.node}


@pytest.mark.parametrize("form", ["rai", "dir"])
@pytest.mark.parametrize(("option", "on_cpu"), SPLITS)
def test_partitioned_model_matches_source(
    form: str, option: dict[str, Any], on_cpu: set[str], tmp_path: Path
) -> None:
    model = conv_net()
    out = compile_model(
        model, tmp_path / ("m.rai" if form == "rai" else "m"), batch_size=2, **option
    )
    compiled = load_model(out)
    par0, par1 = compiled.partitions
    assert (par0.name, par0.target, par1.name, par1.target) == ("par_0", "npu", "par_1", "cpu")
    assert par0.inputs == ("x",)
    assert _node_names(par1.onnx_bytes) - {""} >= on_cpu
    assert not (_node_names(par0.onnx_bytes) & on_cpu)
    crossing = {m.name for m in compiled.intermediates}
    assert crossing and crossing == set(par1.inputs) and crossing <= set(par0.outputs)
    for m in compiled.intermediates:
        assert m.info.shape[0] == 2  # static shapes, batch included
    x = np.random.default_rng(1).normal(size=(2, 3, 16, 16)).astype(np.float32)
    got, want = run_compiled(compiled, {"x": x}), run_source(model, {"x": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


def test_partition_with_folded_views(tmp_path: Path) -> None:
    """Folding and partitioning compose: the output layout nodes follow their output."""
    model = conv_net()
    compiled = load_model(
        compile_model(
            model,
            tmp_path / "m.rai",
            input_layout="NHWC",
            input_dtype="fp16",
            output_layout={"features": "NC4HW4"},
            cpu_tail=True,
        )
    )
    x_spec, feat = compiled.inputs[0], compiled.outputs[0]
    x = np.random.default_rng(2).normal(size=(1, 3, 16, 16)).astype(np.float32)
    hw_in = to_hw(x, x_spec.hw)
    got = run_compiled(compiled, {"x": hw_in})
    want = run_source(model, {"x": from_hw(hw_in, x_spec.hw, x_spec.cpu)})
    np.testing.assert_allclose(from_hw(got["features"], feat.hw, feat.cpu), want["features"],
                               rtol=1e-4, atol=1e-4)  # fmt: skip
    np.testing.assert_allclose(got["probs"], want["probs"], rtol=1e-4, atol=1e-5)


def test_model_input_needed_on_cpu_is_forwarded_through_par0() -> None:
    """A CPU node reading the model input gets it as an intermediate, not as a model input."""
    model = conv_net()
    graph = model.graph
    graph.node.append(
        onnx.helper.make_node("ReduceMax", ["x"], ["xmax"], name="xmax", axes=[2, 3], keepdims=0)
    )
    graph.node.append(onnx.helper.make_node("Softmax", ["xmax"], ["xsoft"], name="xsoft"))
    graph.output.append(onnx.helper.make_tensor_value_info("xsoft", onnx.TensorProto.FLOAT, None))
    from copyless.model import compile_to_memory

    compiled = compile_to_memory(model, cpu_ops=("Softmax",))
    par0, par1 = compiled.partitions
    assert par0.inputs == ("x",) and "x" not in par1.inputs
    x = np.random.default_rng(3).normal(size=(1, 3, 16, 16)).astype(np.float32)
    got, want = run_compiled(compiled, {"x": x}), run_source(model, {"x": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"cpu_ops": ("TopK",)}, "no node of those types"),
        ({"cpu_partition_after": "nope"}, "no node or node output"),
        ({"cpu_partition_after": "softmax"}, "CPU partition is empty"),
        ({"cpu_ops": ("Conv",)}, "whole model"),
        ({"cpu_tail": True, "cpu_ops": ("Softmax",)}, "at most one"),
    ],
)
def test_bad_partition_options(option: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=message):
        compile_model(conv_net(), tmp_path / "m.rai", **option)


def test_constant_nodes_are_copied_not_crossed() -> None:
    """Exporters that emit weights as Constant nodes: the CPU side gets its own copy."""
    model = conv_net()
    graph = model.graph
    wf = next(t for t in graph.initializer if t.name == "wf")
    graph.initializer.remove(wf)
    graph.node.insert(0, onnx.helper.make_node("Constant", [], ["wf"], name="wf_const", value=wf))
    from copyless.model import compile_to_memory

    compiled = compile_to_memory(model, cpu_partition_after="flatten")
    par0, par1 = compiled.partitions
    assert par1.inputs == ("flat",) and [m.name for m in compiled.intermediates] == ["flat"]
    assert "wf_const" in _node_names(par1.onnx_bytes)
    assert "wf_const" not in _node_names(par0.onnx_bytes)
    x = np.random.default_rng(4).normal(size=(1, 3, 16, 16)).astype(np.float32)
    got, want = run_compiled(compiled, {"x": x}), run_source(model, {"x": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)
