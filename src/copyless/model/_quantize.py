"""Static INT8 quantization: onnxruntime's ``quantize_static`` in QDQ format.

The form is U8S8, the one onnxruntime's x86 INT8 kernels run fastest: activations uint8 per
tensor (asymmetric), weights int8 per output channel with a 7-bit range (``reduce_range``:
AVX2's ``VPMADDUBSW`` sums u8*s8 pairs in int16 and saturates on full-range weights; the
per-channel scales win the bit back: with 7-bit per-tensor weights Lite0 misread ``coffee``).
EfficientNet-Lite0 on AVX2: 4.65 ms vs 7.3 ms for int8 activations; OpenVINO runs both alike.
Boundary tensors keep INT8 HW views: a uint8 activation with zero point ``zp`` is exactly the
INT8 view with zero point ``zp - 128``.

Calibration images are resized to the model input (H, W) with PIL (bilinear, no crop),
converted to RGB (or L for one-channel inputs) and fed as ``(pixel - mean) / std`` in
pixel units; ``mean``/``std`` default to 0 and 1 (raw 0..255 pixels), so give the model's
own normalisation (e.g. ``mean=(127,)*3, std=(128,)*3``) even without ``input_format``.

The quantization parameters of the boundary tensors come from the quantized graph itself
(the QuantizeLinear reading an input, the DequantizeLinear producing an output), so the HW
views carry exactly the parameters the graph uses; a boundary tensor the quantizer left in
float gets parameters from the calibration range instead.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime import quantization as ortq

from ..types import NpuTensorInfo, OptionError, QuantParameters, UnsupportedError
from ._graph import IR_VERSION
from ._shapes import ORT_ERRORS, session

_log = logging.getLogger(__name__)

_QUANT_ERRORS: tuple[type[BaseException], ...] = (*ORT_ERRORS, KeyError, TypeError)


@dataclass(frozen=True, slots=True)
class Quantized:
    """The QDQ model and the parameters of its float boundary tensors."""

    model: onnx.ModelProto
    inputs: dict[str, QuantParameters]
    outputs: dict[str, QuantParameters]
    #: its agreement with the float model on the calibration images (see .precision)
    precision: dict[str, Any] = field(default_factory=dict)


def calibration_batches(
    paths: tuple[Path, ...],
    info: NpuTensorInfo,
    mean: tuple[float, ...] | None,
    std: tuple[float, ...] | None,
) -> list[np.ndarray]:
    """The calibration images as model-input batches ``[N, C, H, W]`` float32 (a copy each).

    The last batch is filled up by repeating images.
    """
    from PIL import Image, UnidentifiedImageError

    if len(info.shape) != 4 or info.shape[1] not in (1, 3):
        raise UnsupportedError(
            f"calibration images need an image input [N,1|3,H,W]; {info.describe()} is not one"
        )
    n, c, h, w = info.shape
    m = np.asarray(mean if mean is not None else (0.0,) * 3, np.float32)[:c].reshape(c, 1, 1)
    s = np.asarray(std if std is not None else (1.0,) * 3, np.float32)[:c].reshape(c, 1, 1)
    images = []
    for path in paths:
        try:
            with Image.open(path) as img:
                pixels = np.asarray(img.convert("RGB" if c == 3 else "L").resize((w, h)))
        except (OSError, UnidentifiedImageError) as exc:
            raise OptionError(f"calibration image {str(path)!r} cannot be read: {exc}") from exc
        chw = pixels.reshape(h, w, c).transpose(2, 0, 1).astype(np.float32)
        images.append((chw - m) / s)
    while len(images) % n:
        images.append(images[len(images) % len(paths)])
    return [np.stack(images[i : i + n]).astype(info.numpy_dtype) for i in range(0, len(images), n)]


class _Reader(ortq.CalibrationDataReader):  # type: ignore[misc]
    def __init__(self, name: str, batches: list[np.ndarray]) -> None:
        self._name = name
        self._batches = batches
        self._iter: Iterator[np.ndarray] = iter(batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        batch = next(self._iter, None)
        return None if batch is None else {self._name: batch}

    def rewind(self) -> None:
        self._iter = iter(self._batches)


_PRE_PROCESSED = "onnx.quant.pre_process"


def _marked_pre_processed(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` carrying the mark of onnxruntime's quantization pre-processing.

    The compiler hands over a graph with every shape fixed and inferred (what the
    pre-processing's shape inference is for), so onnxruntime's "Please consider to run
    pre-processing" hint does not apply; left unmarked, it goes through ``logging.warning``,
    which also configures the root logger (basicConfig) from inside copyless and leaks into
    the apps' output.
    """
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    props = {prop.key: prop.value for prop in model.metadata_props}
    props[_PRE_PROCESSED] = "onnxruntime.quant"
    onnx.helper.set_model_props(marked, props)
    return marked


def _drop_pre_processed_mark(model: onnx.ModelProto) -> None:
    """Remove the mark :func:`_marked_pre_processed` added (the compiled graph keeps the
    source model's own metadata only)."""
    kept = [(p.key, p.value) for p in model.metadata_props if p.key != _PRE_PROCESSED]
    del model.metadata_props[:]
    for key, value in kept:
        model.metadata_props.add(key=key, value=value)


def quantize_int8(
    model: onnx.ModelProto,
    name: str,
    batches: list[np.ndarray],
    op_types: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
) -> Quantized:
    """QDQ-quantize ``model`` (float, fixed shapes) calibrated on ``batches`` for input ``name``.

    ``op_types`` limits quantization to those op types (e.g. ``("Conv", "Gemm")``: the rest
    stays float between DequantizeLinear/QuantizeLinear pairs); empty = onnxruntime's default.
    ``exclude`` names nodes that stay float (a folded detector postprocess); the outputs they
    produce get no INT8 view.
    """
    with tempfile.TemporaryDirectory(prefix="copyless-quant-") as tmp:
        out, src = Path(tmp) / "quantized.onnx", Path(tmp) / "float.onnx"
        # A path, not the proto: quantize_static moves a proto's weights to external data.
        onnx.save(_marked_pre_processed(model), str(src))
        try:
            ortq.quantize_static(
                src,
                out,
                _Reader(name, batches),
                quant_format=ortq.QuantFormat.QDQ,
                per_channel=True,
                activation_type=ortq.QuantType.QUInt8,
                weight_type=ortq.QuantType.QInt8,
                calibrate_method=ortq.CalibrationMethod.MinMax,
                extra_options={"CalibTensorRangeSymmetric": False},
                op_types_to_quantize=list(op_types) or None,
                nodes_to_exclude=list(exclude) or None,
                reduce_range=True,
            )
        except _QUANT_ERRORS as exc:
            raise UnsupportedError(f"INT8 quantization failed: {exc}") from exc
        quantized = onnx.load(str(out))
    _drop_pre_processed_mark(quantized)
    quantized.ir_version = min(quantized.ir_version, IR_VERSION)
    ranges = _float_ranges(model, name, batches)
    graph = quantized.graph
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    inputs = {
        name: _params_of(graph, "QuantizeLinear", name, consts, is_input=True)
        or _from_range(*ranges[name])
    }
    outputs = {}
    skipped = {out for node in model.graph.node if node.name in exclude for out in node.output}
    for vi in graph.output:
        if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and vi.name not in skipped:
            outputs[vi.name] = _params_of(
                graph, "DequantizeLinear", vi.name, consts, is_input=False
            ) or _from_range(*ranges[vi.name])
    return Quantized(quantized, inputs, outputs)


def _params_of(
    graph: onnx.GraphProto, op: str, tensor: str, consts: dict[str, Any], *, is_input: bool
) -> QuantParameters | None:
    for node in graph.node:
        if node.op_type != op or len(node.input) < 3:
            continue
        if (node.input[0] if is_input else node.output[0]) != tensor:
            continue
        scale, zp = consts.get(node.input[1]), consts.get(node.input[2])
        if scale is None or zp is None or scale.size != 1 or zp.dtype not in (np.int8, np.uint8):
            return None
        # A uint8 activation q is the INT8 view's q - 128 with zero point zp - 128: exact.
        shift = 128 if zp.dtype == np.uint8 else 0
        return QuantParameters(float(scale.reshape(())), int(zp.reshape(())) - shift)
    return None


def _float_ranges(
    model: onnx.ModelProto, name: str, batches: list[np.ndarray]
) -> dict[str, tuple[float, float]]:
    """min/max of the input and every float output of the float model over the batches."""
    sess = session(model.SerializeToString())
    names = [o.name for o in sess.get_outputs()]
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for batch in batches:
        values = dict(zip(names, sess.run(None, {name: batch}), strict=True))
        values[name] = batch
        for key, value in values.items():
            arr = np.asarray(value)
            if arr.dtype.kind != "f" or arr.size == 0:
                continue
            lo[key] = min(lo.get(key, 0.0), float(arr.min()))
            hi[key] = max(hi.get(key, 0.0), float(arr.max()))
    return {k: (lo[k], hi[k]) for k in lo}


def _from_range(lo: float, hi: float) -> QuantParameters:
    """Asymmetric INT8 parameters covering [lo, hi] (always including 0)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0 or 1.0
    return QuantParameters(scale, int(np.clip(round(-128 - lo / scale), -128, 127)))
