"""Compile -> write -> load -> run the partitions with onnxruntime, for each view option,
in both on-disk forms; outputs are compared with the source model run directly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from compiler_support import conv_net, from_hw, run_compiled, run_source, to_hw

from copyless.model import CompiledModel, compile_model, compile_to_memory, load_model
from copyless.types import DataType, MemoryLayout, QuantParameters, TensorType

FORMS = ["rai", "dir"]


def roundtrip(model: onnx.ModelProto, form: str, tmp: Path, **options: Any) -> CompiledModel:
    out = compile_model(model, tmp / ("m.rai" if form == "rai" else "m_dir"), **options)
    loaded = load_model(out)
    assert loaded == compile_to_memory(model, **options)  # the file holds exactly what we compiled
    return loaded


def _pixels(n: int, size: int = 16, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (n, 3, size, size)).astype(np.float32)


@pytest.mark.parametrize("form", FORMS)
def test_default_views_equal_cpu_views(form: str, tmp_path: Path) -> None:
    model = conv_net()
    compiled = roundtrip(model, form, tmp_path)
    assert compiled.batch_size == 1 and len(compiled.partitions) == 1
    for spec in (*compiled.inputs, *compiled.outputs):
        assert spec.cpu.tensor_type is TensorType.CPU and spec.hw.tensor_type is TensorType.HW
        assert (spec.hw.data_type, spec.hw.shape) == (spec.cpu.data_type, spec.cpu.shape)
        assert spec.quant is None and not spec.dynamic
    assert compiled.inputs[0].cpu.memory_layout is MemoryLayout.NCHW
    assert compiled.outputs[1].cpu.memory_layout is MemoryLayout.NC
    x = _pixels(1)
    got = run_compiled(compiled, {"x": x})
    want = run_source(model, {"x": x})
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    graph = onnx.load_from_string(compiled.partitions[0].onnx_bytes)
    assert graph.ir_version <= 10


@pytest.mark.parametrize("form", FORMS)
def test_rgbx_input_folds_unpacking_and_normalisation(form: str, tmp_path: Path) -> None:
    model = conv_net()
    mean, std = (123.7, 116.3, 103.5), (58.4, 57.1, 57.4)
    compiled = roundtrip(model, form, tmp_path, input_format="rgbx", mean=mean, std=std)
    spec = compiled.inputs[0]
    assert spec.hw.memory_layout is MemoryLayout.NHWC4 and spec.hw.data_type is DataType.UINT8
    assert spec.hw.shape == (1, 16, 16, 4)
    assert spec.cpu.data_type is DataType.FLOAT32 and spec.cpu.shape == (1, 3, 16, 16)
    assert spec.quant == QuantParameters(1.0, 0)
    ops = [n.op_type for n in onnx.load_from_string(compiled.partitions[0].onnx_bytes).graph.node]
    # the padded stem with per-channel means takes the mean form (see copyless.model._stem)
    assert ops[:5] == ["Transpose", "Slice", "Cast", "Sub", "Conv"]
    rng = np.random.default_rng(5)
    rgbx = rng.integers(0, 256, (1, 16, 16, 4), dtype=np.uint8)  # x byte is garbage on purpose
    got = run_compiled(compiled, {"x": rgbx})
    rgb = rgbx[..., :3].transpose(0, 3, 1, 2).astype(np.float32)
    normalised = (rgb - np.reshape(mean, (1, 3, 1, 1))) / np.reshape(std, (1, 3, 1, 1))
    want = run_source(model, {"x": normalised.astype(np.float32)})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


CASES = [
    # (input layout, input dtype, output layout for "features", output dtype)
    ("HCWNC4", "bf16", "HCWNC4", "bf16"),
    ("NHWC", "fp16", "NHWC", "fp16"),
    ("NC4HW4", "fp32", "NHWC8", "fp32"),
    ("HCWNC8", "fp16", "NC8HW8", "bf16"),
    ("NHWC4", "bf16", "HCWNC16", "fp16"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("in_layout", "in_dtype", "out_layout", "out_dtype"), CASES)
def test_hw_layouts_and_dtypes(
    form: str, in_layout: str, in_dtype: str, out_layout: str, out_dtype: str, tmp_path: Path
) -> None:
    model = conv_net()
    compiled = roundtrip(
        model, form, tmp_path, batch_size=2, input_layout=in_layout, input_dtype=in_dtype,
        output_layout={"features": out_layout}, output_dtype=out_dtype,
    )  # fmt: skip
    x_spec = compiled.inputs[0]
    feat, probs = compiled.outputs
    assert x_spec.hw.memory_layout is MemoryLayout[in_layout]
    assert feat.hw.memory_layout is MemoryLayout[out_layout]
    assert probs.hw.memory_layout is MemoryLayout.NC  # no layout asked for probs
    assert feat.hw.data_type is probs.hw.data_type
    x = _pixels(2)
    hw_in = to_hw(x, x_spec.hw)
    got = run_compiled(compiled, {"x": hw_in})
    # reference: the source fed the same (rounded) values the HW view holds
    want = run_source(model, {"x": from_hw(hw_in, x_spec.hw, x_spec.cpu)})
    tol = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1e-2}[out_dtype]
    for spec in compiled.outputs:
        assert got[spec.name].shape == spec.hw.shape
        assert got[spec.name].dtype == spec.hw.numpy_dtype
        back = from_hw(got[spec.name], spec.hw, spec.cpu)
        np.testing.assert_allclose(back, want[spec.name], rtol=tol, atol=tol)
    if feat.hw.shape[-1] != 6 and out_layout.startswith("NHWC"):
        assert not np.any(got["features"][..., 6:].astype(np.float32))  # zero padding


def test_hcwnc4_bf16_shape_matches_the_contract() -> None:
    compiled = compile_to_memory(conv_net(size=224), input_layout="HCWNC4", input_dtype="bf16")
    assert compiled.inputs[0].hw.shape == (224, 1, 224, 1, 4)
    assert compiled.inputs[0].hw.numpy_dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("form", FORMS)
def test_batch_size(form: str, tmp_path: Path) -> None:
    model = conv_net()
    compiled = roundtrip(model, form, tmp_path, batch_size=3)
    assert compiled.batch_size == 3
    assert compiled.inputs[0].cpu.shape == (3, 3, 16, 16)
    assert [s.cpu.shape[0] for s in compiled.outputs] == [3, 3]
    x = _pixels(3)
    got, want = run_compiled(compiled, {"x": x}), run_source(model, {"x": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


def test_static_batch_model_keeps_its_shape() -> None:
    compiled = compile_to_memory(conv_net(batch=1))
    assert compiled.batch_size == 1 and compiled.inputs[0].cpu.shape == (1, 3, 16, 16)


def test_input_shapes_fix_symbolic_spatial_dims() -> None:
    model = conv_net(batch="N")
    for vi in (model.graph.input[0], model.graph.output[0]):
        vi.type.tensor_type.shape.dim[2].dim_param = "H"
        vi.type.tensor_type.shape.dim[3].dim_param = "W"
    compiled = compile_to_memory(model, input_shapes={"x": (2, 3, 20, 12)}, batch_size=2)
    assert compiled.inputs[0].cpu.shape == (2, 3, 20, 12)
    assert compiled.outputs[0].cpu.shape == (2, 6, 20, 12)
