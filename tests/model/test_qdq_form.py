"""onnxruntime's form of NNCF's QDQ graph (model/_qdq_form.py): exact (every tensor keeps its
value), and what makes onnxruntime fuse the convolutions."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from copyless.model._qdq_form import onnxruntime_form


def _run(model: onnx.ModelProto, x: np.ndarray, *, optimize: bool) -> np.ndarray:
    options = ort.SessionOptions()
    if not optimize:  # onnxruntime's reference Q/DQ kernels, nothing fused
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])  # fmt: skip
    return np.asarray(sess.run(None, {"x": x})[0])


def _clip_then_quantize(high: float, scale: float) -> onnx.ModelProto:
    """x -> Clip(0, high) -> QuantizeLinear(scale, uint8 zp 0) -> DequantizeLinear -> y."""
    inits = [numpy_helper.from_array(np.array(v, dtype), n) for n, v, dtype in (
        ("lo", 0.0, np.float32), ("hi", high, np.float32), ("s", scale, np.float32),
        ("z", 0, np.uint8))]  # fmt: skip
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"], name="clip"),
        helper.make_node("QuantizeLinear", ["c", "s", "z"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq"),
    ]
    graph = helper.make_graph(
        nodes, "clip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], initializer=inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize(("high", "scale", "folded"), [
    (6.0, 6.0 / 255.0, True),  # the quantizer's range [0, 6] is the clip's: it clips alike
    (6.0, 4.0 / 255.0, True),  # [0, 4] inside [0, 6]
    (6.0, 10.0 / 255.0, False),  # [0, 10] reaches past 6: the clip stays
])  # fmt: skip
def test_a_clip_goes_only_where_the_quantizer_clips_alike(
    high: float, scale: float, folded: bool
) -> None:
    model = _clip_then_quantize(high, scale)
    form = onnxruntime_form(model)
    assert ("Clip" not in [n.op_type for n in form.graph.node]) is folded
    x = np.linspace(-12.0, 12.0, 64, dtype=np.float32)[None]
    np.testing.assert_array_equal(_run(form, x, optimize=False), _run(model, x, optimize=False))


def _nncf_net(tmp_path_factory: pytest.TempPathFactory) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """A conv net with ReLU6 and a residual addition (signed activations), quantized by
    NNCF as the compiler asks (per-tensor activations)."""
    import nncf
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        QuantizationParameters,
    )

    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> TensorProto:
        return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
        helper.make_node("Clip", ["c1", "zero", "six"], ["r1"], name="relu6"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1] * 4),
        helper.make_node("Conv", ["x", "w3", "b3"], ["c3"], name="conv3", pads=[1] * 4),
        helper.make_node("Add", ["c2", "c3"], ["y"], name="add"),
    ]
    inits = [weight("w1", 8, 3, 3, 3), weight("b1", 8), weight("w2", 4, 8, 3, 3),
             weight("b2", 4), weight("w3", 4, 3, 3, 3), weight("b3", 4),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(6.0, np.float32), "six")]  # fmt: skip
    graph = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    data = [rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(16)]
    params = AdvancedQuantizationParameters(
        activations_quantization_params=QuantizationParameters(per_channel=False)
    )
    quantized = nncf.quantize(model, nncf.Dataset(data, lambda x: {"x": x}), subset_size=16,
                              advanced_parameters=params)  # fmt: skip
    return quantized, data


def test_nncf_graphs_keep_every_value_and_fuse(tmp_path_factory: pytest.TempPathFactory) -> None:
    quantized, data = _nncf_net(tmp_path_factory)
    zero_points = [numpy_helper.to_array(t).dtype for t in quantized.graph.initializer
                   if t.name.startswith("zero_point")]  # fmt: skip
    assert np.dtype(np.int8) in zero_points  # NNCF's signed activations are there to move
    form = onnxruntime_form(quantized)
    ops = [n.op_type for n in form.graph.node]
    assert "Clip" not in ops and ops.count("QuantizeLinear") >= 3
    for x in data[:4]:
        np.testing.assert_array_equal(_run(form, x, optimize=False),
                                      _run(quantized, x, optimize=False))  # fmt: skip
    options = ort.SessionOptions()
    path = tmp_path_factory.mktemp("optimized") / "form.onnx"
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(form.SerializeToString(), options, providers=["CPUExecutionProvider"])
    fused = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert fused.count("QLinearConv") == 3 and "Conv" not in fused, fused
