"""Static INT8 quantization: onnxruntime's ``quantize_static`` in QDQ format.

The form is U8S8, the one onnxruntime's x86 INT8 kernels run fastest: activations uint8 per
tensor (asymmetric, ranges fitted on the calibration images), weights int8 per output channel,
symmetric. Weights take the full 8 bits where the compiling CPU has VNNI (AVX512-VNNI or
AVX-VNNI: ``VPDPBUSD`` sums u8*s8 in int32) or is not x86; on x86 without VNNI they take 7 bits
(``reduce_range``: AVX2's ``VPMADDUBSW`` sums u8*s8 pairs in int16 and saturates on full-range
weights). The 8th bit is most of INT8's error on EfficientNet-Lite0: top-1 agreement with fp32
on 200 held-out photo variants went from 67% to 87-88% (96-97% on the photos fp32 is sure of);
the record says which was used. OpenVINO runs the same QDQ graph on its own INT8 kernels.
Boundary tensors keep INT8 HW views: a uint8 activation with zero point ``zp`` is exactly the
INT8 view with zero point ``zp - 128``.

Calibration images get the model's own preprocessing (:func:`calibration_batches`): the
recorded resize policy (torchvision's resize-short-side + centre crop for ``crop``, a
letterbox, or a stretch; a YUV model's ``input_crop``), the colour order, and ``(pixel - mean)
/ std`` in pixel units (``mean``/``std`` default to 0 and 1: give the model's own
normalisation even without ``input_format``). At least :data:`MIN_CALIBRATION` images, none
unreadable, under one in :data:`GREY_SHARE` greyscale for a colour model: anything else is
refused in one line
(OptionError) before the quantizer runs. One image in :data:`HOLD_OUT` is kept out of the
ranges and measures the INT8 model's agreement with fp32 (:mod:`._precision`).

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

from ..types import NpuTensorInfo, OptionError, QuantParameters, UnsupportedError, cpu_info
from ._graph import IR_VERSION
from ._preprocessing import ResizePolicy
from ._shapes import ORT_ERRORS, session

_log = logging.getLogger(__name__)

_QUANT_ERRORS: tuple[type[BaseException], ...] = (*ORT_ERRORS, KeyError, TypeError)
#: Fewer calibration images than this are refused: activation ranges fitted on a handful of
#: photos clip what the next photo shows (3 photos: 67% top-1 agreement on Lite0).
MIN_CALIBRATION = 100
#: Every HOLD_OUT-th calibration image is kept out of the ranges to measure the agreement.
HOLD_OUT = 5
#: A colour model's calibration folder may hold a few greyscale photos, not one in GREY_SHARE.
GREY_SHARE = 10


@dataclass(frozen=True, slots=True)
class Quantized:
    """The QDQ model and the parameters of its float boundary tensors."""

    model: onnx.ModelProto
    inputs: dict[str, QuantParameters]
    outputs: dict[str, QuantParameters]
    #: its agreement with the float model on the calibration images (see .precision)
    precision: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Model-input batches ``[N, C, H, W]`` float32: ``fit`` (the ranges are fitted on them)
    and ``check`` (held out: the agreement with fp32 is measured on them); ``fit_images`` /
    ``check_images`` count the images (the last batch of each is filled up by repeating)."""

    fit: list[np.ndarray]
    check: list[np.ndarray]
    fit_images: int
    check_images: int


def calibration_batches(
    paths: tuple[Path, ...],
    info: NpuTensorInfo,
    mean: tuple[float, ...] | None,
    std: tuple[float, ...] | None,
    resize: ResizePolicy | None = None,
    bgr: bool = False,
    hold_out: int = HOLD_OUT,
    minimum: int = MIN_CALIBRATION,
) -> Calibration:
    """The calibration images as the model sees them (module docstring), split into the
    images the ranges are fitted on and the held-out ones (every ``hold_out``-th; 1: all of
    them, nothing to fit); OptionError, in one line, for fewer than ``minimum`` images, an
    unreadable one, or (when ranges are fitted) greyscale images for a colour model."""
    from PIL import Image, UnidentifiedImageError

    if len(info.shape) != 4 or info.shape[1] not in (1, 3):
        raise UnsupportedError(
            f"calibration images need an image input [N,1|3,H,W]; {info.describe()} is not one"
        )
    if len(paths) < minimum:
        why = (
            "INT8 ranges need at least {} varied images like the ones the model will see "
            "(each activation's range is fitted on them)"
            if hold_out > 1
            else "an agreement figure needs at least {} varied images like the ones the "
            "model will see"
        )
        raise OptionError(f"calibration: {len(paths)} images; {why.format(minimum)}")
    n, c, h, w = info.shape
    m = np.asarray(mean if mean is not None else (0.0,) * 3, np.float32)[:c].reshape(c, 1, 1)
    s = np.asarray(std if std is not None else (1.0,) * 3, np.float32)[:c].reshape(c, 1, 1)
    images, grey = [], []
    for path in paths:
        try:
            with Image.open(path) as img:
                rgb = img.convert("RGB")
                rgb.load()
        except (OSError, UnidentifiedImageError, ValueError) as exc:
            raise OptionError(f"calibration image {str(path)!r} cannot be read: {exc}") from exc
        if c == 3 and _is_grey(rgb):
            grey.append(path)
        pixels = np.asarray(_fit(rgb if c == 3 else rgb.convert("L"), w, h, resize))
        chw = pixels.reshape(h, w, c).transpose(2, 0, 1).astype(np.float32)
        images.append(((chw[::-1] if bgr and c == 3 else chw) - m) / s)
    if hold_out > 1 and len(grey) * GREY_SHARE > len(paths):  # ranges are fitted on them
        raise OptionError(
            f"calibration: {len(grey)} of {len(paths)} images are greyscale (first: "
            f"{str(grey[0])!r}); a colour model's ranges need colour images like the ones it "
            "will see: remove them"
        )
    check = images[hold_out - 1 :: hold_out]
    fit = [image for i, image in enumerate(images) if i % hold_out != hold_out - 1]
    return Calibration(_batches(fit, n, info), _batches(check, n, info), len(fit), len(check))


def _batches(images: list[np.ndarray], n: int, info: NpuTensorInfo) -> list[np.ndarray]:
    """``images`` in batches of ``n``, the last filled up by repeating images."""
    images = list(images)
    count = len(images)
    while len(images) % n:
        images.append(images[len(images) % count])
    return [np.stack(images[i : i + n]).astype(info.numpy_dtype) for i in range(0, len(images), n)]


def _is_grey(rgb: Any) -> bool:
    """Whether an RGB image's three channels are the same everywhere."""
    pixels = np.asarray(rgb)
    red, green, blue = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    return bool((red == green).all() and (green == blue).all())


def _fit(image: Any, width: int, height: int, resize: ResizePolicy | None) -> Any:
    """``image`` (PIL) as the model's ``width`` x ``height`` input under ``resize``, with PIL's
    bilinear filter: torchvision's Resize + CenterCrop for ``crop``, centred on the fill for
    ``letterbox``, else stretched."""
    from PIL import Image

    iw, ih = image.size
    if resize is not None and resize.policy == "crop":
        short = resize.short_side(min(width, height))
        size = (short, int(short * ih / iw)) if iw <= ih else (int(short * iw / ih), short)
        size = (max(size[0], width), max(size[1], height))
        left, top = round((size[0] - width) / 2.0), round((size[1] - height) / 2.0)
        resized = image.resize(size, Image.Resampling.BILINEAR)
        return resized.crop((left, top, left + width, top + height))
    if resize is not None and resize.policy == "letterbox":
        scale = min(width / iw, height / ih)
        size = (max(1, min(width, round(iw * scale))), max(1, min(height, round(ih * scale))))
        fill = (resize.fill,) * (3 if image.mode == "RGB" else 1)
        canvas = Image.new(image.mode, (width, height), fill if len(fill) > 1 else fill[0])
        canvas.paste(image.resize(size, Image.Resampling.BILINEAR),
                     ((width - size[0]) // 2, (height - size[1]) // 2))  # fmt: skip
        return canvas
    return image.resize((width, height), Image.Resampling.BILINEAR)


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


def weight_bits() -> int:
    """8 where this CPU sums u8*s8 products without saturating (x86 with VNNI, other
    architectures), 7 on x86 without VNNI (see the module docstring)."""
    cpu = cpu_info()
    if not cpu.x86:
        return 8
    return 8 if cpu.flags & {"avx512_vnni", "avx_vnni", "avx_vnni_int8"} else 7


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
                extra_options={"CalibTensorRangeSymmetric": False, "WeightSymmetric": True},
                op_types_to_quantize=list(op_types) or None,
                nodes_to_exclude=list(exclude) or None,
                reduce_range=weight_bits() == 7,
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
