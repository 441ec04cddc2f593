"""The price of a reduced precision, measured when the model is compiled and recorded in it.

A reduced-precision model answers differently from its fp32 source: an INT8 one
(``compile_model(..., precision="int8", calibration=...)``, :mod:`._quantize`) everywhere, a
BF16 one (``precision="bf16"``, OpenVINO's BF16 arithmetic: :mod:`._bf16`) where it runs.
The compiler runs both the reference and the reduced model on images the model has not been
fitted on (INT8: ``validation=`` images, else one calibration image in five, held out; BF16:
every calibration image, nothing is fitted; as the model sees them: its own resize, colour
order and normalisation) and records in the compiled model's metadata (key ``"precision"``,
JSON; this module owns it)::

    {"precision": "int8", "reference": "fp32", "engine": "onnxruntime", "images": 25,
     "images_from": "held-out calibration", "top1": 92.0, "sure_images": 17,
     "top1_sure": 100.0, "dp_median": 0.02, "dp_p95": 0.1,
     "quantizer": "nncf 3.4.0 (min-max ranges, bias correction)",
     "weights": "int8 per channel, symmetric, 8-bit",
     "activations": "uint8 per tensor, asymmetric",
     "calibration": {"images": 102, "greyscale": 13, "skipped": 0},
     "layers": {"int8": 56, "float": 2}, "max_drop": 2.0, "reverted": ["conv_stem_3", ...],
     "speed": {"fp32_ms": 9.1, "int8_ms": 3.7, "ratio": 2.46, "engine": "openvino", ...}}

``top1`` is the percentage of images whose top-1 class is the fp32 model's, ``top1_sure`` the
same on the images the fp32 model is sure of (top-1 probability >= :data:`SURE`), ``dp_*`` the
largest softmax probability difference per image (classifiers: a ``[N, classes]`` first
output); other models get ``rel_error``, the mean |difference| of the first output over its
fp32 range. ``speed`` (:mod:`._speed`) compares each precision on its fastest engine here.
``max_drop`` (accuracy control, :mod:`._accuracy`) lists the layers ``reverted`` to float;
those images then steered the reverts, so a separate ``validation=`` set, or a larger
held-out set (``python benchmarks/accuracy.py``), says more. ``min_agreement``
(``--min-agreement``) makes the compiler refuse a model whose ``top1`` falls below it,
naming the figure (:func:`check_agreement`). A model kept fp32 (``precision="fastest"``
chose it, or INT8 was declined) records ``{"precision": "fp32", "why": ...}``; one chosen
by ``precision="fastest"`` adds ``fastest``: every candidate's agreement and speed.
:func:`precision_line` is the one line applications print for such a model;
:func:`slower_than_fp32` the line a runner logs where the engine it runs on makes the
reduced precision slower than the fp32 model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx

from ..types import QuantParameters, UnsupportedError, cpu_info
from ._shapes import ORT_ERRORS, session

_log = logging.getLogger(__name__)

KEY = "precision"
#: "Sure" images: the fp32 model's top-1 softmax probability is at least this.
SURE = 0.3
#: ``run(batch) -> first output``: one model on one engine.
Run = Callable[[np.ndarray], np.ndarray]
#: onnxruntime's, and the shape mismatch of outputs whose size changes (detections)
_ERRORS: tuple[type[BaseException], ...] = (*ORT_ERRORS, ValueError)


def measure(
    reference: Run,
    reduced: Run,
    batches: list[np.ndarray],
    images: int,
    precision: str = "int8",
    images_from: str = "calibration",
    engine: str = "onnxruntime",
) -> dict[str, Any]:
    """Run ``reference`` (fp32) and ``reduced`` on ``batches``; the record of :data:`KEY`
    (empty when either fails to run: logged)."""
    try:
        ref = np.concatenate([reference(b) for b in batches])[:images].astype(np.float64)
        out = np.concatenate([reduced(b) for b in batches])[:images].astype(np.float64)
        if ref.shape != out.shape:
            raise ValueError(f"output shapes differ: {ref.shape} vs {out.shape}")
        if ref.size == 0:
            raise ValueError("the first output is empty on these images")
    except _ERRORS as exc:
        _log.warning("%s agreement with fp32 not measured: %s", precision, exc)
        return {}
    record: dict[str, Any] = {
        "precision": precision, "reference": "fp32", "engine": engine,
        "images": int(ref.shape[0]), "images_from": images_from,
    }  # fmt: skip
    if ref.ndim == 2 and ref.shape[1] > 1 and ref.shape[0] == images:
        p, q = _softmax(out), _softmax(ref)
        dp = np.abs(p - q).max(axis=1)
        same = p.argmax(1) == q.argmax(1)
        sure = q.max(axis=1) >= SURE
        record["top1"] = round(100.0 * float(np.mean(same)), 1)
        record["sure_images"] = int(sure.sum())
        if sure.any():
            record["top1_sure"] = round(100.0 * float(np.mean(same[sure])), 1)
        record["dp_median"] = round(float(np.median(dp)), 4)
        record["dp_p95"] = round(float(np.percentile(dp, 95)), 4)
    else:
        span = float(ref.max() - ref.min()) or 1.0
        record["rel_error"] = round(float(np.abs(out - ref).mean()) / span, 5)
    return record


def onnxruntime_run(model: onnx.ModelProto, name: str) -> Run:
    """``model``'s first output on onnxruntime, fed through its input ``name`` (the session
    is made on the first call, inside :func:`measure`, which reports its errors)."""
    sessions: list[Any] = []

    def run(batch: np.ndarray) -> np.ndarray:
        if not sessions:
            sessions.append(session(model.SerializeToString()))
        sess = sessions[0]
        return np.asarray(sess.run([sess.get_outputs()[0].name], {name: batch})[0])

    return run


def through_int8(run: Run, quant: QuantParameters | None) -> Run:
    """``run`` with its output read back through an INT8 view with ``quant`` (quantized,
    rounded half to even, saturated, dequantized: what a caller of the compiled model reads
    from its INT8 output view); ``run`` itself for None (a float view)."""
    if quant is None:
        return run
    scale, zero = quant.scale, quant.zero_point

    def viewed(batch: np.ndarray) -> np.ndarray:
        q = np.clip(np.rint(run(batch) / scale) + zero, -128, 127)
        result: np.ndarray = ((q - zero) * scale).astype(np.float32)
        return result

    return viewed


def check_agreement(record: Mapping[str, Any], minimum: float | None) -> None:
    """Refuse (UnsupportedError, naming the figures) a reduced-precision model whose top-1
    agreement with fp32 is below ``minimum`` percent, or was not measured."""
    if minimum is None:
        return
    if "top1" not in record:
        what = f"its error is {record['rel_error']} of the output range" if record else (
            "its agreement could not be measured")  # fmt: skip
        raise UnsupportedError(
            f"min_agreement={minimum:g}% needs a classifier's top-1 ([N, classes] first "
            f"output); {what}"
        )
    if record["top1"] < minimum:
        raise UnsupportedError(
            f"{record.get('precision', 'int8')} model refused: top-1 agrees with "
            f"{record.get('reference', 'fp32')} on {record['top1']}% of {record['images']} "
            f"{record.get('images_from', '')} images, below min_agreement={minimum:g}%"
        )


def precision_of(metadata: Mapping[str, str]) -> dict[str, Any] | None:
    """The recorded :data:`KEY` of a compiled model's metadata; None when absent or
    unreadable (never raises)."""
    text = metadata.get(KEY)
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("precision") else None


def run_precision(metadata: Mapping[str, str]) -> str:
    """The arithmetic a compiled model asks to run in: ``"bf16"`` for one compiled with
    ``precision="bf16"`` (or ``"fastest"`` that kept BF16), else ``"f32"`` (its own)."""
    data = precision_of(metadata)
    return "bf16" if data is not None and data["precision"] == "bf16" else "f32"


def precision_line(metadata: Mapping[str, str]) -> str | None:
    """One line saying what a reduced-precision model costs, e.g. ``int8 model: top-1 as
    fp32 on 92.0% of 25 held-out calibration images, 100.0% of the 17 fp32 is sure of
    (median max|dp| 0.02); 2.46x fp32's speed (3.7 vs 9.1 ms, measured when compiled)``,
    or ``bf16 model (OpenVINO): ...``; None for fp32 models."""
    data = precision_of(metadata)
    if data is None:
        return None
    if data["precision"] == "fp32":  # precision="fastest" kept fp32, or int8 was declined
        return f"fp32 model: {data.get('why', 'kept fp32')}"
    where = f"{data.get('images', '?')} {data.get('images_from', '')} images".replace("  ", " ")
    engine = " (OpenVINO)" if data["precision"] == "bf16" else ""
    if "top1" in data:
        sure = ""
        if "top1_sure" in data:
            sure = f", {data['top1_sure']}% of the {data.get('sure_images', '?')} fp32 is sure of"
        line = (
            f"{data['precision']} model{engine}: top-1 as {data.get('reference', 'fp32')} on "
            f"{data['top1']}% of {where}{sure} (median max|dp| {data.get('dp_median', '?')})"
        )
    else:
        line = (
            f"{data['precision']} model{engine}: mean error {data.get('rel_error', '?')} of "
            f"the {data.get('reference', 'fp32')} output range on {where}"
        )
    return line + _layers(data) + _speed(data) + _chosen(data)


def _layers(data: Mapping[str, Any]) -> str:
    layers = data.get("layers")
    if not isinstance(layers, dict) or "max_drop" not in data:
        return ""
    floats, total = layers.get("float", 0), layers.get("float", 0) + layers.get("int8", 0)
    return f"; {floats} of {total} layers float to stay within {data['max_drop']:g} points"


def _speed(data: Mapping[str, Any]) -> str:
    speed = data.get("speed")
    if not isinstance(speed, dict) or "ratio" not in speed:
        return ""
    p = data["precision"]
    figures = f"{speed.get(p + '_ms', '?')} vs {speed.get('fp32_ms', '?')} ms"
    slower = ": slower than the fp32 model here" if speed["ratio"] < 1.0 else ""
    return f"; {speed['ratio']}x fp32's speed{slower} ({figures}, measured when compiled)"


def _chosen(data: Mapping[str, Any]) -> str:
    fastest = data.get("fastest")
    if not isinstance(fastest, dict):
        return ""
    return f"; chosen by precision='fastest' ({fastest.get('why', '')})"


def slower_than_fp32(metadata: Mapping[str, str], engine: str) -> str | None:
    """One line where the model's reduced precision on ``engine`` ran slower than its fp32
    model on the fp32 model's fastest engine, as recorded when compiled on this CPU; None
    otherwise (no record, another CPU, or not slower)."""
    data = precision_of(metadata)
    speed = None if data is None else data.get("speed")
    if data is None or not isinstance(speed, dict) or speed.get("cpu") != cpu_info().name:
        return None
    p = data["precision"]
    mine = speed.get("engines", {}).get(engine, {}).get(f"{p}_ms")
    fp32 = speed.get("fp32_ms")
    if not isinstance(mine, (int, float)) or not isinstance(fp32, (int, float)) or mine <= fp32:
        return None
    return (
        f"its {p} graph runs slower on {engine} than its fp32 model ({mine} vs {fp32} ms on "
        f"{speed.get('fp32_engine', '?')}, measured when it was compiled on this CPU)"
    )


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    result: np.ndarray = e / e.sum(axis=1, keepdims=True)
    return result
