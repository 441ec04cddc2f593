"""RGBx normalisation folded into the first convolution (copyless.model._stem).

Every folded graph is checked against the source model fed with the same pixels normalised
on the CPU (the definition of the RGBx view), with the x channel filled with noise that the
folded convolution must ignore.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from compiler_support import run_compiled
from onnx import helper
from PIL import Image

from copyless.model import CompiledModel, compile_to_memory, zoo
from model_helpers import conv_net

LITE0_MEAN, LITE0_STD = (127.0,) * 3, (128.0,) * 3
IMAGENET_MEAN, IMAGENET_STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


def _ops(compiled: CompiledModel) -> list[str]:
    graph = onnx.load_from_string(compiled.partitions[0].onnx_bytes).graph
    return [n.op_type for n in graph.node]


def _pixels(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """[N, H, W, 4] uint8 frames: random RGB and a random x channel."""
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _reference(model: onnx.ModelProto, rgbx: np.ndarray, mean: tuple[float, ...],
               std: tuple[float, ...]) -> np.ndarray:  # fmt: skip
    x = (rgbx[..., :3].astype(np.float32) - np.float32(mean)) / np.float32(std)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.asarray(session.run(None, {name: np.ascontiguousarray(x.transpose(0, 3, 1, 2))})[0])


def _check(model: onnx.ModelProto, mean: tuple[float, ...], std: tuple[float, ...],
           folded: bool, **options: object) -> None:  # fmt: skip
    compiled = compile_to_memory(model, input_format="rgbx", mean=mean, std=std, **options)
    ops = _ops(compiled)
    assert ("Mul" not in ops[:6]) is folded, ops[:8]
    if not folded:  # the generic fold moves bytes before it widens them to float
        assert ops[:5] == ["Transpose", "Slice", "Cast", "Mul", "Add"], ops[:8]
    hw = compiled.inputs[0].hw
    rgbx = _pixels(hw.shape, 1)
    (got,) = run_compiled(compiled, {hw.name: rgbx}).values()
    want = _reference(model, rgbx, mean, std)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)


def test_padded_stem_with_a_uniform_mean_is_folded_with_a_pixel_pad() -> None:
    _check(conv_net(size=16), LITE0_MEAN, LITE0_STD, folded=True)
    ops = _ops(compile_to_memory(conv_net(), input_format="rgbx", mean=LITE0_MEAN, std=LITE0_STD))
    assert ops[:5] == ["Pad", "Transpose", "Slice", "Cast", "Conv"]


def test_padded_stem_with_per_channel_means_is_folded_with_a_mean_subtraction() -> None:
    _check(conv_net(size=16), IMAGENET_MEAN, IMAGENET_STD, folded=True)
    model = conv_net(size=16)
    ops = _ops(compile_to_memory(model, input_format="rgbx", mean=IMAGENET_MEAN, std=IMAGENET_STD))
    assert ops[:5] == ["Transpose", "Slice", "Cast", "Sub", "Conv"]


def test_stem_weights_in_constant_nodes_without_bias_are_folded() -> None:
    """Exported models (PP-OCRv4) hold weights in Constant nodes and convolve without bias."""
    model = conv_net(size=16)
    graph = model.graph
    conv = graph.node[0]
    weights = next(i for i in graph.initializer if i.name == conv.input[1])
    constant = helper.make_node("Constant", [], [weights.name], value=weights)
    kept = [i for i in graph.initializer if i.name not in conv.input[1:]]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    del conv.input[2:]
    nodes = [constant, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    _check(model, IMAGENET_MEAN, IMAGENET_STD, folded=True)
    ops = _ops(compile_to_memory(model, input_format="rgbx", mean=IMAGENET_MEAN, std=IMAGENET_STD))
    assert "Constant" not in ops  # the original weights went with the fold


def _unpadded_stem(stride: int = 2) -> onnx.ModelProto:
    model = conv_net(size=16)
    conv = model.graph.node[0]
    for attr in conv.attribute:
        if attr.name == "pads":
            attr.ints[:] = [0, 0, 0, 0]
    conv.attribute.append(helper.make_attribute("strides", [stride, stride]))
    output = model.graph.output[0]
    output.type.tensor_type.shape.dim[1].dim_value = 10
    return model


def test_unpadded_stem_folds_any_normalisation() -> None:
    _check(_unpadded_stem(), IMAGENET_MEAN, IMAGENET_STD, folded=True)
    ops = _ops(
        compile_to_memory(
            _unpadded_stem(), input_format="rgbx", mean=IMAGENET_MEAN, std=IMAGENET_STD
        )
    )
    assert ops[:4] == ["Transpose", "Slice", "Cast", "Conv"]


def test_batched_stem_is_folded() -> None:
    _check(conv_net(batch="N", size=16), LITE0_MEAN, LITE0_STD, folded=True, batch_size=3)


def test_input_read_twice_keeps_the_generic_fold() -> None:
    model = conv_net(size=16)
    graph = model.graph
    # a second reader of the input: logits + mean(input), still a [1, 10] output
    graph.node[-1].output[0] = "gemm"
    graph.node.extend(
        [
            helper.make_node("ReduceMean", ["input"], ["m"], keepdims=0),
            helper.make_node("Add", ["gemm", "m"], ["logits"]),
        ]
    )
    _check(model, LITE0_MEAN, LITE0_STD, folded=False)


def test_grouped_stem_keeps_the_generic_fold() -> None:
    model = conv_net(size=16, channels=3)
    conv = model.graph.node[0]
    weights = next(i for i in model.graph.initializer if i.name == conv.input[1])
    w = onnx.numpy_helper.to_array(weights)[:3, :1]  # 3 output channels, one per group
    weights.CopyFrom(onnx.numpy_helper.from_array(np.ascontiguousarray(w), weights.name))
    bias = next(i for i in model.graph.initializer if i.name == conv.input[2])
    bias.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(bias)[:3], bias.name))
    conv.attribute.append(helper.make_attribute("group", 3))
    fc = next(i for i in model.graph.initializer if i.name == "fc")
    fc.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(fc)[:, :3].copy(), "fc"))
    _check(model, LITE0_MEAN, LITE0_STD, folded=False)


@pytest.mark.parametrize("photo", ["chelsea.jpg", "coffee.jpg"])
def test_efficientnet_lite0_folded_stem_agrees_with_the_source(photo: str) -> None:
    model = onnx.load(str(zoo.build("efficientnet-lite0", progress=False)))
    compiled = compile_to_memory(model, input_format="rgbx", mean=LITE0_MEAN, std=LITE0_STD)
    assert _ops(compiled)[:5] == ["Pad", "Transpose", "Slice", "Cast", "Conv"]
    image = Image.open(zoo.photo_path(photo)).convert("RGB").resize((224, 224))
    rgbx = np.zeros((1, 224, 224, 4), np.uint8)
    rgbx[0, ..., :3] = np.asarray(image)
    rgbx[0, ..., 3] = 255
    (got,) = run_compiled(compiled, {compiled.inputs[0].hw.name: rgbx}).values()
    want = _reference(model, rgbx, LITE0_MEAN, LITE0_STD)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    assert int(np.argmax(got)) == int(np.argmax(want))
