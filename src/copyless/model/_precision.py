"""The price of a reduced precision, measured when the model is compiled and recorded in it.

An INT8 model answers differently from its fp32 source. ``compile_model(...,
quantize="int8", calibration=...)`` runs both with onnxruntime on the calibration images the
ranges were not fitted on (one in five, held out; as the model sees them: its own resize,
colour order and normalisation) and records in the compiled model's metadata (key
``"precision"``, JSON)::

    {"precision": "int8", "reference": "fp32", "engine": "onnxruntime", "images": 26,
     "images_from": "held-out calibration", "top1": 88.5, "dp_median": 0.03, "dp_p95": 0.2,
     "weights": "int8 per channel, symmetric, 8-bit",
     "calibration": {"images": 102, "ranges": "min-max"}}

``top1`` is the percentage of images whose top-1 class is the fp32 model's, ``dp_*`` the
largest softmax probability difference per image (classifiers: a ``[N, classes]`` first
output); other models get ``rel_error``, the mean |difference| of the first output over its
fp32 range. ``min_agreement`` (``--min-agreement``) makes the compiler refuse a model whose
``top1`` falls below it, naming the figure (:func:`check_agreement`). A larger held-out set
(``copyless-bench accuracy``) says more. :func:`precision_line` is the one line
applications print for such a model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from ..types import UnsupportedError
from ._shapes import ORT_ERRORS, session

_log = logging.getLogger(__name__)

KEY = "precision"
#: onnxruntime's, and the shape mismatch of outputs whose size changes (detections)
_ERRORS: tuple[type[BaseException], ...] = (*ORT_ERRORS, ValueError)


def measure(
    reference: onnx.ModelProto,
    reduced: onnx.ModelProto,
    name: str,
    batches: list[np.ndarray],
    images: int,
    precision: str = "int8",
    images_from: str = "calibration",
) -> dict[str, Any]:
    """Run ``reference`` (fp32) and ``reduced`` on ``batches`` (input ``name``) with
    onnxruntime; the record of :data:`KEY` (empty when either fails to run: logged)."""
    try:
        want = [_first_output(session(reference.SerializeToString()), name, b) for b in batches]
        got = [_first_output(session(reduced.SerializeToString()), name, b) for b in batches]
        ref = np.concatenate(want)[:images].astype(np.float64)
        out = np.concatenate(got)[:images].astype(np.float64)
        if ref.shape != out.shape:
            raise ValueError(f"output shapes differ: {ref.shape} vs {out.shape}")
        if ref.size == 0:
            raise ValueError("the first output is empty on these images")
    except _ERRORS as exc:
        _log.warning("%s agreement with fp32 not measured: %s", precision, exc)
        return {}
    record: dict[str, Any] = {
        "precision": precision, "reference": "fp32", "engine": "onnxruntime",
        "images": int(ref.shape[0]), "images_from": images_from,
    }  # fmt: skip
    if ref.ndim == 2 and ref.shape[1] > 1 and ref.shape[0] == images:
        p, q = _softmax(out), _softmax(ref)
        dp = np.abs(p - q).max(axis=1)
        record["top1"] = round(100.0 * float(np.mean(p.argmax(1) == q.argmax(1))), 1)
        record["dp_median"] = round(float(np.median(dp)), 4)
        record["dp_p95"] = round(float(np.percentile(dp, 95)), 4)
    else:
        span = float(ref.max() - ref.min()) or 1.0
        record["rel_error"] = round(float(np.abs(out - ref).mean()) / span, 5)
    return record


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


def precision_line(metadata: Mapping[str, str]) -> str | None:
    """One line saying what a reduced-precision model costs, e.g. ``int8 model: top-1 as
    fp32 on 66.7% of 3 calibration images (median max|dp| 0.21)``; None for fp32 models."""
    data = precision_of(metadata)
    if data is None:
        return None
    where = f"{data.get('images', '?')} {data.get('images_from', '')} images".replace("  ", " ")
    if "top1" in data:
        return (
            f"{data['precision']} model: top-1 as {data.get('reference', 'fp32')} on "
            f"{data['top1']}% of {where} (median max|dp| {data.get('dp_median', '?')})"
        )
    return (
        f"{data['precision']} model: mean error {data.get('rel_error', '?')} of the "
        f"{data.get('reference', 'fp32')} output range on {where}"
    )


def _first_output(sess: Any, name: str, batch: np.ndarray) -> np.ndarray:
    return np.asarray(sess.run([sess.get_outputs()[0].name], {name: batch})[0])


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    result: np.ndarray = e / e.sum(axis=1, keepdims=True)
    return result
