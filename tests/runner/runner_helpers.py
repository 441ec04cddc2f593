"""Runner test helpers: a small real conv net, the onnxruntime reference, tensor pairs."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import onnxruntime as ort

import copyless as cl
from copyless.runner import Runner


def conv_net(batch: int | str = 1, size: int = 16, channels: int = 3) -> onnx.ModelProto:
    """A small real conv net: Conv(3->8) + Relu + GlobalAveragePool + Flatten + Gemm(8->10)."""
    rng = np.random.default_rng(0)
    weights = onh.from_array(rng.standard_normal((8, channels, 3, 3)).astype(np.float32), "w")
    bias = onh.from_array(rng.standard_normal(8).astype(np.float32), "b")
    fc = onh.from_array(rng.standard_normal((10, 8)).astype(np.float32), "fc")
    fcb = onh.from_array(rng.standard_normal(10).astype(np.float32), "fcb")
    nodes = [
        oh.make_node("Conv", ["input", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c"], ["r"]),
        oh.make_node("GlobalAveragePool", ["r"], ["p"]),
        oh.make_node("Flatten", ["p"], ["f"]),
        oh.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
    ]
    graph = oh.make_graph(
        nodes,
        "conv_net",
        [oh.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [batch, channels, size, size])],
        [oh.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [batch, 10])],
        [weights, bias, fc, fcb],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """What onnxruntime computes on the source model: the ground truth."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(x) for x in session.run(None, feeds)]


def tensors(runner: Runner, view: cl.TensorType) -> tuple[cl.NpuTensor, cl.NpuTensor]:
    """One runner-allocated input and output tensor in ``view``."""
    (in_info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, view)
    (out_info,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, view)
    return runner.allocate_npu_tensor(in_info), runner.allocate_npu_tensor(out_info)
