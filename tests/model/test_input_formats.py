"""``input_format``: RGBx FP16/BF16 and planar RGB give what the RGBx uint8 path gives;
``input_crop`` is torchvision's resize 256 + centre crop 224, done in the graph."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import skimage.data
from compiler_support import run_compiled
from PIL import Image

import copyless as cl
from copyless.apps.compile import main
from copyless.model import CompiledModel, compile_to_memory, zoo
from copyless.model._input_formats import centre_crop
from copyless.types import DataType, MemoryLayout, OptionError, QuantParameters

NORM = {"mean": (127, 127, 127), "std": (128, 128, 128)}
CATS = {281, 282, 285}
FRAME = (240, 320)
PIXELS = {
    "rgbx": ((1, 240, 320, 4), MemoryLayout.NHWC4, DataType.UINT8),
    "rgbx_fp16": ((1, 240, 320, 4), MemoryLayout.NHWC4, DataType.FP16),
    "rgbx_bf16": ((1, 240, 320, 4), MemoryLayout.NHWC4, DataType.BF16),
    "rgbp": ((1, 3, 240, 320), MemoryLayout.NCHW, DataType.UINT8),
    "rgbp_fp16": ((1, 3, 240, 320), MemoryLayout.NCHW, DataType.FP16),
    "rgbp_float": ((1, 3, 240, 320), MemoryLayout.NCHW, DataType.FLOAT32),
}


@pytest.fixture(scope="module")
def effnet() -> Path:
    return zoo.build("efficientnet-lite0", progress=False)


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    """chelsea at 320x240, as a decoder delivers it."""
    image = Image.fromarray(skimage.data.chelsea()).resize(FRAME[::-1], Image.BILINEAR)
    return np.asarray(image)


def _compile(effnet: Path, fmt: str) -> CompiledModel:
    return compile_to_memory(effnet, input_format=fmt, input_size=FRAME, input_crop=0.875, **NORM)


@pytest.fixture(scope="module")
def reference(effnet: Path, frame: np.ndarray) -> np.ndarray:
    """Logits of the RGBx uint8 path (the x byte set, it must be ignored)."""
    rgbx = np.concatenate([frame, np.full((*FRAME, 1), 99, np.uint8)], axis=-1)[None]
    return run_compiled(_compile(effnet, "rgbx"), {"input": rgbx})["logits"][0]


def _pixels(frame: np.ndarray, fmt: str) -> np.ndarray:
    dtype = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "float": np.float32}.get(
        fmt.rpartition("_")[2], np.uint8
    )
    if fmt.startswith("rgbx"):
        return np.concatenate([frame, np.zeros((*FRAME, 1), np.uint8)], axis=-1)[None].astype(dtype)
    return frame.transpose(2, 0, 1)[None].astype(dtype)


@pytest.mark.parametrize("fmt", [f for f in PIXELS if f != "rgbx"])
def test_every_pixel_format_gives_the_uint8_paths_logits(
    effnet: Path, frame: np.ndarray, reference: np.ndarray, fmt: str
) -> None:
    compiled = _compile(effnet, fmt)
    (spec,) = compiled.inputs
    assert (spec.hw.shape, spec.hw.memory_layout, spec.hw.data_type) == PIXELS[fmt]
    assert (spec.cpu.shape, spec.cpu.data_type) == ((1, 3, *FRAME), DataType.FLOAT32)
    assert spec.quant == (QuantParameters(1.0, 0) if fmt == "rgbp" else None)
    logits = run_compiled(compiled, {"input": _pixels(frame, fmt)})["logits"][0]
    assert int(logits.argmax()) == int(reference.argmax()) and int(logits.argmax()) in CATS
    # 0..255 pixels are exact in fp16 and bf16: only the graph's float rounding differs.
    np.testing.assert_allclose(logits, reference, atol=2e-3)


def test_the_runner_converts_float_pixels_into_a_bf16_rgbx_view(
    effnet: Path, frame: np.ndarray, reference: np.ndarray, tmp_path: Path
) -> None:
    path = cl.compile_model(effnet, tmp_path / "bf16.rai", input_format="RGBx_BF16",
                            input_size=FRAME, input_crop=0.875, **NORM)  # fmt: skip
    options = {"input_tensor_type": "CPU", "output_tensor_type": "CPU"}
    with cl.RunnerFactory.create_runner(path, options) as runner:
        (x_info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.CPU)
        (y_info,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.CPU)
        x, y = runner.allocate_npu_tensor(x_info), runner.allocate_npu_tensor(y_info)
        x.numpy()[:] = frame.transpose(2, 0, 1)[None]
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
        np.testing.assert_allclose(y.numpy()[0], reference, atol=2e-3)


def test_crop_in_the_graph_is_resize_256_and_centre_crop_224(
    effnet: Path, frame: np.ndarray, reference: np.ndarray
) -> None:
    assert centre_crop(FRAME, (224, 224), 0.875) == (15, 55, 210, 210)
    assert centre_crop((480, 640), (224, 224), 0.875, align=2) == (30, 110, 420, 420)
    assert centre_crop((97, 131), (224, 224), 0.875, align=2) == (6, 22, 84, 84)
    image = Image.fromarray(frame).resize((341, 256), Image.BILINEAR).crop((58, 16, 282, 240))
    plain = compile_to_memory(effnet, input_format="rgbx", **NORM)
    rgbx = np.concatenate([np.asarray(image), np.zeros((224, 224, 1), np.uint8)], axis=-1)[None]
    logits = run_compiled(plain, {"input": rgbx})["logits"][0]
    assert int(logits.argmax()) == int(reference.argmax())
    # PIL resizes twice with uint8 rounding in between; the graph once, in float.
    assert np.abs(logits - reference).max() < 1.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"input_format": "yuyv"}, "input_format must be one of"),
        ({"input_format": "rgbx", "input_crop": 0.5}, "input_crop needs input_size"),
        ({"input_format": "rgbx", "input_size": "8x8", "input_crop": 1.5}, "fraction in (0, 1]"),
        ({"input_format": "rgbx", "yuv_matrix": "bt709"}, "need input_format='i420' or 'nv12'"),
        ({"input_format": "nv12", "yuv_matrix": "bt2020"}, "yuv_matrix must be one of"),
        ({"input_format": "i420", "yuv_range": "tv"}, "yuv_range must be one of"),
    ],
)
def test_bad_format_options_are_refused_by_name(options: dict[str, object], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace("]", r"\]")):
        cl.compile_model("unused.onnx", "unused.rai", **options)


def test_the_cli_takes_vart_spellings(effnet: Path, tmp_path: Path) -> None:
    out = tmp_path / "fp16.rai"
    assert main([str(effnet), "-o", str(out), "--input-format", "RGBx-FP16",
                 "--input-size", "120x160", "--input-crop", "0.875"]) == 0  # fmt: skip
    (spec,) = cl.model.load_model(out).inputs
    assert (spec.hw.shape, spec.hw.data_type) == ((1, 120, 160, 4), DataType.FP16)


def test_the_cli_compiles_decoder_planes(effnet: Path, tmp_path: Path) -> None:
    out = tmp_path / "i420.rai"
    flags = ["--input-format", "i420", "--input-size", "120x160", "--yuv-matrix", "bt709",
             "--yuv-range", "full", "--input-crop", "0.875",
             "--input-line-sizes", "192,96"]  # fmt: skip
    assert main([str(effnet), "-o", str(out), *flags]) == 0
    compiled = cl.model.load_model(out)
    assert [(s.name, s.hw.shape) for s in compiled.inputs] == [
        ("input_y", (1, 120, 192)), ("input_u", (1, 60, 96)), ("input_v", (1, 60, 96))]  # fmt: skip
    options = json.loads(compiled.metadata["options"])
    assert (options["yuv_matrix"], options["yuv_range"], options["input_crop"]) == (
        "bt709", "full", 0.875)  # fmt: skip
    assert options["input_line_sizes"] == [192, 96]
