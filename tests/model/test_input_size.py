"""``input_size``: the HW input is the decoder's frame and the graph resizes it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import skimage.data
from compiler_support import run_compiled
from onnx import TensorProto, helper
from PIL import Image

from copyless.apps.compile import main
from copyless.model import CompiledModel, compile_model, compile_to_memory, load_model, zoo
from copyless.types import DataType, MemoryLayout, OptionError

NORM = {"mean": (127, 127, 127), "std": (128, 128, 128)}
CATS = {281, 282, 285}  # tabby, tiger cat, Egyptian cat
ESPRESSO = 967


def _rgbx(rgb: np.ndarray) -> np.ndarray:
    pad = np.full((*rgb.shape[:2], 1), 77, np.uint8)  # the x byte must be ignored
    return np.concatenate([rgb, pad], axis=-1)[None]


def _frame(name: str, height: int, width: int) -> np.ndarray:
    """A photo as a decoder would deliver it at the stream's size (H x W RGB)."""
    image = Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
    return np.asarray(image.resize((width, height), Image.BILINEAR))


@pytest.fixture(scope="module")
def effnet() -> Path:
    return zoo.build("efficientnet-lite0", progress=False)


@pytest.fixture(scope="module")
def effnet_224(effnet: Path, tmp_path_factory: pytest.TempPathFactory) -> CompiledModel:
    out = tmp_path_factory.mktemp("size") / "effnet_224.rai"
    return load_model(compile_model(effnet, out, input_format="rgbx", **NORM))


@pytest.fixture(scope="module")
def effnet_480x640(effnet: Path, tmp_path_factory: pytest.TempPathFactory) -> CompiledModel:
    out = tmp_path_factory.mktemp("size") / "effnet_480x640.rai"
    return load_model(
        compile_model(effnet, out, input_format="rgbx", input_size=(480, 640), **NORM)
    )


def test_hw_input_is_the_frame_and_the_graph_resizes_it(effnet_480x640: CompiledModel) -> None:
    x = effnet_480x640.inputs[0]
    assert (x.hw.memory_layout, x.hw.data_type, x.hw.shape) == (
        MemoryLayout.NHWC4, DataType.UINT8, (1, 480, 640, 4))  # fmt: skip
    assert (x.cpu.data_type, x.cpu.shape) == (DataType.FLOAT32, (1, 3, 480, 640))
    model = onnx.load_from_string(effnet_480x640.partitions[0].onnx_bytes)
    ops = [n.op_type for n in model.graph.node]
    # the resize is fixed taps (see test_resample.py), not ONNX Resize: no opset change
    assert "Resize" not in ops and ops.count("Gather") >= 2 and ops.count("MatMul") >= 2
    assert {o.domain: o.version for o in model.opset_import}[""] == 17


@pytest.mark.parametrize("photo", ["chelsea", "coffee"])
def test_resizing_in_the_graph_matches_resizing_on_the_cpu_first(
    effnet_480x640: CompiledModel, effnet_224: CompiledModel, photo: str
) -> None:
    frame = _frame(photo, 480, 640)
    in_graph = run_compiled(effnet_480x640, {"input": _rgbx(frame)})["logits"][0]
    on_cpu = np.asarray(Image.fromarray(frame).resize((224, 224), Image.BILINEAR))
    reference = run_compiled(effnet_224, {"input": _rgbx(on_cpu)})["logits"][0]
    assert int(in_graph.argmax()) == int(reference.argmax())
    assert int(in_graph.argmax()) in (CATS if photo == "chelsea" else {ESPRESSO})
    # PIL rounds its resized pixels to uint8, the graph keeps them float: small differences.
    assert np.abs(in_graph - reference).max() < 0.5


def _mean_net(opset: int) -> onnx.ModelProto:
    """[1,3,8,8] -> per-channel mean; ReduceMean's axes attribute is gone in opset 18."""
    node = helper.make_node("ReduceMean", ["input"], ["mean"], axes=[2, 3], keepdims=0)
    graph = helper.make_graph(
        [node],
        "mean_net",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("mean", TensorProto.FLOAT, [1, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("opset", [11, 17])
def test_older_opsets_get_the_same_filtered_resize(opset: int) -> None:
    """The resize's ops exist at every fold opset: the model keeps its own, PIL's filter."""
    compiled = compile_to_memory(_mean_net(opset), input_format="rgbx", input_size="16x16")
    model = onnx.load_from_string(compiled.partitions[0].onnx_bytes)
    assert {o.domain: o.version for o in model.opset_import}[""] == opset
    frame = np.random.default_rng(3).integers(0, 256, (16, 16, 3), np.uint8)
    got = run_compiled(compiled, {"input": _rgbx(frame)})["mean"][0]
    planes = [Image.fromarray(frame[..., c].astype(np.float32), mode="F") for c in range(3)]
    want = [np.round(np.asarray(p.resize((8, 8), Image.BILINEAR))).mean() for p in planes]
    np.testing.assert_allclose(got, want, atol=0.02)  # whole levels, as PIL's uint8 pixels


def test_same_size_as_the_model_adds_no_resize() -> None:
    compiled = compile_to_memory(_mean_net(17), input_format="rgbx", input_size=(8, 8))
    model = onnx.load_from_string(compiled.partitions[0].onnx_bytes)
    assert all(n.op_type != "Resize" for n in model.graph.node)
    assert compiled.inputs[0].hw.shape == (1, 8, 8, 4)


@pytest.mark.parametrize(
    "options",
    [
        {"input_size": (16, 16)},  # no input_format
        {"input_format": "rgbx", "input_size": "16"},
        {"input_format": "rgbx", "input_size": "16x0"},
        {"input_format": "rgbx", "input_size": (16, 16, 16)},
        {"input_format": "rgbx", "input_size": (16.5, 16)},
        {"input_format": "rgbx", "input_size": (True, 16)},
        {"input_format": "rgbx", "input_size": "axb"},
        {"input_format": "rgbx", "input_size": (1 << 15, 16)},
    ],
)
def test_bad_input_sizes_are_option_errors(options: dict[str, object]) -> None:
    with pytest.raises(OptionError, match="input_size"):
        compile_to_memory(_mean_net(17), **options)


def test_cli_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "mean.onnx"
    onnx.save(_mean_net(17), source)
    out = tmp_path / "mean.rai"
    argv = [str(source), "-o", str(out), "--input-format", "rgbx", "--input-size", "24x32"]
    assert main(argv) == 0
    assert load_model(out).inputs[0].hw.shape == (1, 24, 32, 4)
    assert main([*argv[:-1], "24by32"]) == 2
    assert "input_size" in capsys.readouterr().err
