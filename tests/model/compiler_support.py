"""Helpers for the compiler tests: small real ONNX nets, a partition executor, and an
independent numpy reference of the HW layouts (written from layout/_views.py's table)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from copyless.layout import GROUP
from copyless.model import CompiledModel
from copyless.types import DataType, MemoryLayout, NpuTensorInfo, QuantParameters


def _init(name: str, arr: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(arr.astype(np.float32), name)


def conv_net(*, batch: int | str = "N", size: int = 16, seed: int = 0) -> onnx.ModelProto:
    """x [N,3,S,S] -> features [N,6,S,S] (Conv+Relu+Conv+Relu) and probs [N,10]
    (GlobalAveragePool, Flatten, Gemm, Softmax)."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _init("b1", rng.normal(0, 0.1, (8,))),
        _init("w2", rng.normal(0, 0.3, (6, 8, 3, 3))),
        _init("b2", rng.normal(0, 0.1, (6,))),
        _init("wf", rng.normal(0, 0.5, (10, 6))),
        _init("bf", rng.normal(0, 0.1, (10,))),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["features"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["features"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, [batch, 6, size, size]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10]),
        ],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def run_source(model: onnx.ModelProto | Path, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    src = model if isinstance(model, (str, Path)) else model.SerializeToString()
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))


def _ortvalue(arr: np.ndarray) -> ort.OrtValue:
    if arr.dtype == ml_dtypes.bfloat16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            np.ascontiguousarray(arr).view(np.uint16), TensorProto.BFLOAT16
        )
    return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr))


def run_compiled(compiled: CompiledModel, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the partitions in order with onnxruntime, as the runner will: model inputs in
    their HW view, intermediates passed along, outputs in their HW view."""
    specs = {s.name: s for s in compiled.outputs}
    values: dict[str, np.ndarray] = dict(feeds)
    for part in compiled.partitions:
        sess = ort.InferenceSession(part.onnx_bytes, providers=["CPUExecutionProvider"])
        binding = sess.io_binding()
        for name in part.inputs:
            binding.bind_ortvalue_input(name, _ortvalue(values[name]))
        held = {}
        for name in part.outputs:
            spec = specs.get(name)
            if spec is not None and spec.hw.data_type is DataType.BF16:
                held[name] = np.zeros(spec.hw.shape, ml_dtypes.bfloat16)
                binding.bind_ortvalue_output(name, _ortvalue(held[name]))
                held[name] = held[name]  # the OrtValue shares this buffer
            else:
                binding.bind_output(name)
        sess.run_with_iobinding(binding)
        for name, value in zip(part.outputs, binding.get_outputs(), strict=True):
            values[name] = held[name] if name in held else value.numpy()
    return {s.name: values[s.name] for s in compiled.outputs}


# --- independent numpy reference of the HW views ---------------------------------------


def to_hw(x: np.ndarray, info: NpuTensorInfo, quant: QuantParameters | None = None) -> np.ndarray:
    """CPU array (NCHW for 4-D) -> HW view array, by the table in layout/_views.py."""
    layout = info.memory_layout
    if quant is not None:
        lim = np.iinfo(info.numpy_dtype)
        x = np.clip(np.rint(x / quant.scale) + quant.zero_point, lim.min, lim.max)
    if layout in GROUP:
        g = GROUP[layout]
        n, c, h, w = x.shape
        blocks = -(-c // g)
        pad = np.zeros((n, blocks * g, h, w), x.dtype)
        if quant is not None:
            pad[:] = quant.zero_point
        pad[:, :c] = x
        if layout in (MemoryLayout.NHWC4, MemoryLayout.NHWC8):
            out = pad.transpose(0, 2, 3, 1)
        else:
            split = pad.reshape(n, blocks, g, h, w)
            blocked = layout in (MemoryLayout.NC4HW4, MemoryLayout.NC8HW8)
            out = split.transpose(0, 1, 3, 4, 2) if blocked else split.transpose(3, 1, 4, 0, 2)
    elif layout is MemoryLayout.NHWC:
        out = x.transpose(0, 2, 3, 1)
    else:
        out = x
    return np.ascontiguousarray(out.astype(info.numpy_dtype))


def from_hw(
    y: np.ndarray, info: NpuTensorInfo, cpu: NpuTensorInfo, quant: QuantParameters | None = None
) -> np.ndarray:
    """HW view array -> CPU array (float32 when dequantizing)."""
    layout = info.memory_layout
    y = (
        y.astype(np.float32)
        if quant is None
        else (y.astype(np.float32) - quant.zero_point) * quant.scale
    )
    if layout in GROUP:
        n, c, h, w = cpu.shape
        if layout in (MemoryLayout.NHWC4, MemoryLayout.NHWC8):
            return y.transpose(0, 3, 1, 2)[:, :c]
        blocked = layout in (MemoryLayout.NC4HW4, MemoryLayout.NC8HW8)
        nbgw = y.transpose(0, 1, 4, 2, 3) if blocked else y.transpose(3, 1, 4, 0, 2)
        return nbgw.reshape(n, -1, h, w)[:, :c]
    if layout is MemoryLayout.NHWC:
        return y.transpose(0, 3, 1, 2)
    return y
