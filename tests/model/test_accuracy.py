"""Accuracy control (model/_accuracy.py): ``max_drop`` reverts layers to float until INT8's
top-1 agrees with fp32 within the drop, records which, and refuses in one line a drop INT8
cannot meet. Real EfficientNet-Lite0 on real photos, and small nets built to fail."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from compiler_support import conv_net
from onnx import TensorProto, helper, numpy_helper

from copyless.model import CompiledModel, compile_to_memory, precision_line, precision_of, zoo
from copyless.types import OptionError, UnsupportedError
from model_helpers import calibration_folder

VIEW = {"input_format": "rgbx", "mean": (127,) * 3, "std": (128,) * 3, "resize": "crop:0.875"}


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return calibration_folder(tmp_path_factory.mktemp("calibration"))


@pytest.fixture(scope="module")
def controlled(photos: Path) -> CompiledModel:
    """Lite0 held to a drop of 15 points: 17 of the 20 held-out crops must agree with fp32
    (plain INT8 agrees on 15 or 16 of them here: layers must go back to float)."""
    effnet = zoo.build("efficientnet-lite0", progress=False)
    return compile_to_memory(effnet, precision="int8", calibration=photos, max_drop=15, **VIEW)


def _float_layers(model: CompiledModel) -> set[str]:
    """Convolutions and matrix products whose weights are not dequantized (run in float)."""
    graph = onnx.load_from_string(model.partitions[0].onnx_bytes).graph
    producer = {o: n.op_type for n in graph.node for o in n.output}
    return {n.name for n in graph.node if n.op_type in ("Conv", "Gemm")
            and producer.get(n.input[1]) != "DequantizeLinear"}  # fmt: skip


def test_max_drop_reverts_layers_until_the_held_out_images_agree(
    controlled: CompiledModel,
) -> None:
    record = precision_of(controlled.metadata)
    assert record is not None and record["precision"] == "int8"
    assert record["top1"] >= 85.0 and record["images"] == 20 and record["max_drop"] == 15.0
    reverted = record["reverted"]
    assert reverted, "plain INT8 agrees on fewer than 17 of these 20: something was reverted"
    assert record["layers"]["float"] == len(reverted) and record["layers"]["int8"] > 40
    graph = onnx.load_from_string(controlled.partitions[0].onnx_bytes).graph
    names = {n.name for n in graph.node}
    assert set(reverted) <= names
    layers = {n.name for n in graph.node if n.op_type in ("Conv", "Gemm")}
    weighted = set(reverted) & layers
    assert weighted == _float_layers(controlled) & set(reverted)
    line = precision_line(controlled.metadata)
    assert line is not None
    assert line.startswith(f"int8 model: top-1 as fp32 on {record['top1']}% of 20 ")
    assert f"; {len(reverted)} of {record['layers']['int8'] + len(reverted)} layers float to " \
           "stay within 15 points" in line


def test_no_drop_at_all_is_refused_with_the_best_reached(photos: Path) -> None:
    """No drop at all on these 20 crops: the search reaches 18 of them (the last two are near
    ties of fp32's top classes) and is refused in one line, with the best agreement reached
    and the layers that were float then."""
    effnet = zoo.build("efficientnet-lite0", progress=False)
    with pytest.raises(UnsupportedError) as caught:
        compile_to_memory(effnet, precision="int8", calibration=photos, max_drop=0, **VIEW)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("max_drop=0 cannot be met in INT8: the best top-1 agreement with "
                              "fp32 was ")  # fmt: skip
    assert " of 61 layers float (" in message


def test_the_reverted_layers_cost_speed_not_answers(controlled: CompiledModel) -> None:
    """Still an INT8 model, faster than fp32 on its fastest engine here."""
    record = precision_of(controlled.metadata)
    assert record is not None
    assert record["speed"]["ratio"] > 1.0, record["speed"]


def _tied_classifier() -> onnx.ModelProto:
    """A classifier whose top two logits differ by 1e-3, class 1 above class 0, on every
    image: the INT8 output view (a step of range / 255) ties them, and a tie reads as class
    0. No layer put back in float changes that: max_drop cannot be met in INT8."""
    rng = np.random.default_rng(1)
    fc = rng.normal(0, 0.5, (10, 8)).astype(np.float32)
    fc[1] = fc[0]
    fcb = np.full(10, -20.0, np.float32)
    fcb[0], fcb[1] = 5.0, 5.001
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("w", rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)),
        ("b", np.zeros(8, np.float32)), ("fc", fc), ("fcb", fcb))]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1] * 4),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_a_drop_int8_cannot_meet_is_refused_in_one_line(photos: Path) -> None:
    with pytest.raises(UnsupportedError) as caught:
        compile_to_memory(_tied_classifier(), precision="int8", calibration=photos,
                          max_drop=50, mean=(127,) * 3, std=(128,) * 3)  # fmt: skip
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("max_drop=50 cannot be met in INT8: the best top-1 agreement "
                              "with fp32 was ")  # fmt: skip
    assert "layers float (" in message and "allow a larger drop" in message
    # read through a float output view, the same model meets it
    model = compile_to_memory(_tied_classifier(), precision="int8", calibration=photos,
                              max_drop=50, mean=(127,) * 3, std=(128,) * 3,
                              output_dtype="fp32")  # fmt: skip
    record = precision_of(model.metadata)
    assert record is not None and record["top1"] >= 50.0


def test_max_drop_needs_a_classifier_and_int8(photos: Path) -> None:
    with pytest.raises(UnsupportedError, match=r"max_drop is a top-1 agreement: it needs a "
                       r"classifier's \[N, classes\] first output; this model's is \[20, 6, "):
        compile_to_memory(conv_net(size=32), precision="int8", calibration=photos, max_drop=1)
    with pytest.raises(OptionError, match="max_drop needs precision="):
        compile_to_memory(conv_net(size=32), max_drop=1)
    with pytest.raises(OptionError, match=r"max_drop must be a percentage 0\.\.100"):
        compile_to_memory(conv_net(size=32), precision="int8", calibration=photos, max_drop=-1)
