"""The price of a reduced precision, measured when the model is compiled and recorded in it.

A reduced-precision model answers differently from its fp32 source: an INT8 one
(``compile_model(..., quantize="int8", calibration=...)``) everywhere, a BF16 one
(``precision="bf16"``, OpenVINO's BF16 arithmetic: :mod:`._bf16`) where it runs. The compiler
runs both the reference and the reduced model on images the model has not been fitted on (INT8:
one calibration image in five, held out; BF16: every calibration image, nothing is fitted; as
the model sees them: its own resize, colour order and normalisation) and records in the
compiled model's metadata (key ``"precision"``, JSON)::

    {"precision": "int8", "reference": "fp32", "engine": "onnxruntime", "images": 26,
     "images_from": "held-out calibration", "top1": 88.5, "sure_images": 19, "top1_sure": 94.7,
     "dp_median": 0.03, "dp_p95": 0.2, "weights": "int8 per channel, symmetric, 8-bit",
     "calibration": {"images": 102, "ranges": "min-max"}}

``top1`` is the percentage of images whose top-1 class is the fp32 model's, ``top1_sure`` the
same on the images the fp32 model is sure of (top-1 probability >= :data:`SURE`), ``dp_*`` the
largest softmax probability difference per image (classifiers: a ``[N, classes]`` first
output); other models get ``rel_error``, the mean |difference| of the first output over its
fp32 range. A BF16 record adds ``speed`` (``{"fp32_ms", "bf16_ms", "ratio", ...}``: interleaved
timed runs of both on the compiling machine). ``min_agreement`` (``--min-agreement``) makes
the compiler refuse a model whose ``top1`` falls below it, naming the figure
(:func:`check_agreement`). A larger held-out set (``copyless-bench accuracy``) says more.
:func:`precision_line` is the one line applications print for such a model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx

from ..types import UnsupportedError
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
    fp32 on 66.7% of 3 calibration images (median max|dp| 0.21)``, or ``bf16 model
    (OpenVINO): top-1 as fp32 on 98.0% of 100 calibration images, 98.9% of the 90 fp32 is
    sure of (median max|dp| 0.004); 1.71x fp32's speed (4.1 vs 7.0 ms)``; None for fp32
    models."""
    data = precision_of(metadata)
    if data is None:
        return None
    if data["precision"] == "fp32":  # precision="fastest" kept fp32
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
    speed = data.get("speed")
    if isinstance(speed, dict) and "ratio" in speed:
        p = data["precision"]
        line += (
            f"; {speed['ratio']}x fp32's speed ({speed.get(p + '_ms', '?')} vs "
            f"{speed.get('fp32_ms', '?')} ms, measured when compiled)"
        )
    return line


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    result: np.ndarray = e / e.sum(axis=1, keepdims=True)
    return result
