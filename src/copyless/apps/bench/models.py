"""The model variants the benchmark runs, built and compiled once and cached.

A :class:`Config` is one model at one precision and batch size. Every pipeline of a config
runs the same network:

* the peers (plain onnxruntime, ORT IOBinding, OpenVINO) read a float-input ONNX model:
  the zoo model itself for FP32; for INT8 the copyless INT8 partition (compiled with the
  default float NCHW input, whose graph takes and gives INT8 tensors) wrapped with one
  QuantizeLinear on its input and one DequantizeLinear on its output (see
  :func:`float_io_qdq`), so the peers run exactly the copyless INT8 weights and scales;
* copyless runs the same network compiled with ``input_format="rgbx"`` and the zoo's
  mean/std folded in (the HW input is packed RGBx uint8), its preprocessing recorded as the
  apps' built-in models record it (the copyless pipelines prepare frames from the record).

Artifacts live under ``zoo.cache_root() / "bench"``, keyed by the zoo file name (which
carries the source package and builder versions) and the compile options.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...model import artifact_key, compile_model, compile_to_memory, zoo
from ...types import QuantParameters, UnsupportedError

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "int8")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A benchmarked zoo model: its task, default photo, input side and larger batch."""

    name: str
    task: str  # "classify" | "detect"
    photo: str
    size: int
    big_batch: int
    calibration: tuple[str, ...]
    frames: int  # default frames per pipeline per round
    quantize_ops: tuple[str, ...] = ()  # INT8: op types to quantize (() = quantizer default)


MODELS: dict[str, ModelSpec] = {
    "efficientnet-lite0": ModelSpec(
        "efficientnet-lite0",
        "classify",
        "chelsea.jpg",
        224,
        8,
        ("chelsea", "coffee", "astronaut"),
        40,
    ),
    "resnet50": ModelSpec(
        "resnet50", "classify", "chelsea.jpg", 224, 8, ("chelsea", "coffee", "astronaut"), 16
    ),
    # 640x640 costs about 10x a classifier frame: the larger batch is 4.
    # INT8: convolutions only. With onnxruntime's default op set OpenVINO 2026.4 cannot
    # compile the detector (MultiplyPartialTransformation fails), and onnxruntime itself runs
    # the Conv-only graph faster (fewer Q/DQ pairs around its many Mul/Add/HardSigmoid).
    "ppocr-det": ModelSpec(
        "ppocr-det",
        "detect",
        "page",
        640,
        4,
        ("page", "chelsea", "coffee", "astronaut"),
        8,
        ("Conv", "ConvTranspose"),
    ),
}


@dataclass(frozen=True, slots=True)
class Config:
    """One measured configuration: a model at a precision and a batch size."""

    model: str
    precision: str
    batch: int

    @property
    def spec(self) -> ModelSpec:
        return MODELS[self.model]

    @property
    def label(self) -> str:
        return f"{self.model} {self.precision} b{self.batch}"


def bench_root() -> Path:
    root = zoo.cache_root() / "bench"
    root.mkdir(parents=True, exist_ok=True)
    return root


def compile_options(config: Config, *, rgbx: bool) -> dict[str, Any]:
    """copyless compile options for ``config`` (RGBx input with mean/std folded, or float)."""
    spec = config.spec
    options: dict[str, Any] = {"batch_size": config.batch, **zoo.compile_options(spec.name)}
    if rgbx:
        options["input_format"] = "rgbx"
    if spec.task == "detect":  # dynamic H, W: fix them at the benchmark's canvas
        options["input_shapes"] = {"x": (config.batch, 3, spec.size, spec.size)}
    if config.precision == "int8":
        options["quantize"] = "int8"
        options["calibration"] = [zoo.photo_path(name) for name in spec.calibration]
        if spec.quantize_ops:
            options["quantize_ops"] = list(spec.quantize_ops)
    return options


def _key(source: Path, options: dict[str, Any]) -> str:
    return artifact_key(source.name, options)


def _cached(target: Path, write: Any) -> Path:
    """``target``, produced by ``write(tmp_path)`` on first use: the zoo's locked, atomic
    cache (:func:`copyless.model.zoo.cached_artifact`)."""
    path, _ = zoo.cached_artifact(target, write)
    return path


def copyless_model(config: Config) -> Path:
    """The ``.rai`` copyless runs: RGBx uint8 input, normalisation folded in."""
    source = zoo.build(config.model, progress=False)
    options = compile_options(config, rgbx=True)
    target = (
        bench_root() / f"{config.model}-{config.precision}-b{config.batch}-rgbx-"
        f"{_key(source, options)}.rai"
    )

    def write(tmp: Path) -> None:
        logger.info("compiling %s (rgbx) -> %s", config.label, target.name)
        compile_model(source, tmp, **options)

    return _cached(target, write)


def peer_model(config: Config) -> Path:
    """The float-input ONNX model the peers run (see the module docstring)."""
    source = zoo.build(config.model, progress=False)
    if config.precision == "fp32":
        return source
    options = compile_options(config, rgbx=False)
    target = bench_root() / f"{config.model}-int8-b{config.batch}-qdq-{_key(source, options)}.onnx"

    def write(tmp: Path) -> None:
        logger.info("compiling %s (float-input QDQ) -> %s", config.label, target.name)
        compiled = compile_to_memory(onnx.load(str(source)), **options)
        if len(compiled.partitions) != 1:
            raise UnsupportedError(f"{config.label}: expected one partition")
        specs = {s.name: s.quant for s in (*compiled.inputs, *compiled.outputs)}
        graph = onnx.load_from_string(compiled.partitions[0].onnx_bytes)
        onnx.save(float_io_qdq(graph, specs), str(tmp))

    return _cached(target, write)


def float_io_qdq(
    model: onnx.ModelProto, quant: dict[str, QuantParameters | None]
) -> onnx.ModelProto:
    """``model`` with every INT8 graph input/output made float through Q/DQ at the boundary.

    An INT8 input ``t`` becomes a float input ``t`` feeding ``QuantizeLinear(t, scale, zp)``
    whose result replaces ``t`` everywhere; an INT8 output ``t`` is renamed and followed by
    ``DequantizeLinear`` producing float ``t``. ``quant`` gives each tensor's parameters.
    """
    graph = model.graph
    added: list[onnx.NodeProto] = []
    for vi in graph.input:
        if vi.type.tensor_type.elem_type != onnx.TensorProto.INT8:
            continue
        inner = f"{vi.name}__int8"
        for node in graph.node:
            node.input[:] = [inner if name == vi.name else name for name in node.input]
        added.append(_qdq_node("QuantizeLinear", vi.name, inner, quant[vi.name], graph))
        vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    nodes = [*added, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    for vi in graph.output:
        if vi.type.tensor_type.elem_type != onnx.TensorProto.INT8:
            continue
        inner = f"{vi.name}__int8"
        for node in graph.node:
            node.output[:] = [inner if name == vi.name else name for name in node.output]
        graph.node.append(_qdq_node("DequantizeLinear", inner, vi.name, quant[vi.name], graph))
        vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    model.ir_version = min(model.ir_version, 10)
    onnx.checker.check_model(model)
    return model


def _qdq_node(
    op: str, src: str, dst: str, params: QuantParameters | None, graph: onnx.GraphProto
) -> onnx.NodeProto:
    if params is None:
        raise UnsupportedError(f"no quantization parameters for INT8 tensor {dst!r}")
    scale, zero = f"{dst}__scale", f"{dst}__zero_point"
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(params.scale, np.float32), scale),
            numpy_helper.from_array(np.array(params.zero_point, np.int8), zero),
        ]
    )
    return helper.make_node(op, [src, scale, zero], [dst], name=f"bench_{op}_{dst}")
