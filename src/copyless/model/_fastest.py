"""The reduced precisions the compiler offers, measured, and ``precision="fastest"``.

``precision="int8"`` (:mod:`._quantize`, with ``max_drop``: :mod:`._accuracy`) and
``precision="bf16"`` (:mod:`._bf16`) each record their agreement with fp32 and their speed
(:mod:`._precision`, :mod:`._speed`). ``precision="fastest"`` makes both where they can be
made here (INT8 needs NNCF; BF16 a CPU with BF16 arithmetic and OpenVINO), holds each to
the same agreement, measured on the same check images (the held-out fifth of the
calibration images, or ``validation=``): top-1 as fp32 on at least ``100 - max_drop``
percent, else ``min_agreement``, else :data:`FASTEST_AGREEMENT` (INT8 reaches it by
accuracy control, reverting layers to float), and keeps the one that runs fastest on its
fastest engine, if at least :data:`FASTER` times fp32's speed there; otherwise the model
stays fp32. The record says which was chosen and why, with every candidate's figures.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import onnx

from ..types import DataType, NpuTensorInfo, UnsupportedError
from ._bf16 import MIN_IMAGES as BF16_IMAGES
from ._bf16 import measure_bf16
from ._calibration import Calibration, ImagePrep, calibration_batches
from ._options import CompileOptions
from ._precision import (
    KEY,
    check_agreement,
    measure,
    onnxruntime_run,
    precision_line,
    through_int8,
)
from ._preprocessing import ResizePolicy
from ._quantize import Quantized, quantize_int8
from ._speed import engine_runs, speed_record

_log = logging.getLogger(__name__)

__all__ = ["FASTER", "FASTEST_AGREEMENT", "reduce_precision"]

#: ``precision="fastest"``: the top-1 agreement a reduced precision needs by default
#: (percent)...
FASTEST_AGREEMENT = 99.5
#: ... and the speed it must reach, in times fp32's.
FASTER = 1.05


def reduce_precision(
    model: onnx.ModelProto,
    opts: CompileOptions,
    inputs: tuple[NpuTensorInfo, ...],
    float_nodes: tuple[str, ...],
) -> tuple[Quantized | None, dict[str, Any]]:
    """``opts.precision`` applied to ``model``: the INT8 graph (None: the model's own graph
    runs) and the precision record (empty for fp32). ``float_nodes`` stay float in INT8."""
    if opts.precision is None:
        return None, {}
    info = _image_input(opts, inputs)
    if opts.precision == "int8":
        calibration = _calibration(opts, info)
        quantized, record = _int8(model, opts, info, calibration, float_nodes, opts.max_drop)
        check_agreement(record, opts.min_agreement)
        return quantized, record
    if opts.precision == "bf16":
        images = _calibration(opts, info, hold_out=1, recommended=BF16_IMAGES,
                              purpose="the agreement is measured on them")  # fmt: skip
        record = _bf16(model, info, images)
        check_agreement(record, opts.min_agreement)
        return None, record
    return _fastest(model, opts, info, float_nodes)


def _image_input(opts: CompileOptions, inputs: tuple[NpuTensorInfo, ...]) -> NpuTensorInfo:
    info = inputs[0]
    if len(inputs) != 1 or info.data_type is not DataType.FLOAT32:
        raise UnsupportedError(
            f"precision={opts.precision!r} is measured on images: it needs a model with one "
            f"float32 image input; this one has {[i.describe() for i in inputs]}"
        )
    return info


def _calibration(opts: CompileOptions, info: NpuTensorInfo, **split: Any) -> Calibration:
    """The calibration images as the model will see them (its resize, normalisation and
    colour order; ``split``: :func:`calibration_batches`' keywords)."""
    policy = opts.resize
    if policy is None and opts.input_crop is not None:  # a YUV model crops in its graph
        policy = ResizePolicy("crop", crop_fraction=opts.input_crop)
    prep = ImagePrep(opts.mean, opts.std, policy, opts.colour_order == "BGR")
    return calibration_batches(opts.calibration, info, prep, validation=opts.validation,
                               **split)  # fmt: skip


def _int8(
    model: onnx.ModelProto,
    opts: CompileOptions,
    info: NpuTensorInfo,
    calibration: Calibration,
    float_nodes: tuple[str, ...],
    max_drop: float | None,
) -> tuple[Quantized | None, dict[str, Any]]:
    """NNCF's INT8 graph and its record (agreement, quantization, speed); None and an fp32
    record saying why where NNCF cannot quantize the model."""
    first = model.graph.output[0].name
    viewed = opts.pick(opts.output_dtype, first) in (None, DataType.INT8)
    quantized = quantize_int8(model, info.name, calibration, op_types=opts.quantize_ops,
                              exclude=float_nodes, max_drop=max_drop,
                              output_view=viewed)  # fmt: skip
    if isinstance(quantized, str):
        return None, {"precision": "fp32", "why": f"int8 declined: {quantized}"}
    # as the caller reads it: through the INT8 output view the compiler gives it
    reduced = through_int8(onnxruntime_run(quantized.model, info.name),
                           quantized.outputs.get(first) if viewed else None)  # fmt: skip
    record = {"precision": "int8", **measure(
        onnxruntime_run(model, info.name), reduced, calibration.check,
        calibration.check_images, images_from=calibration.check_from),
        **quantized.precision}  # fmt: skip
    batch = (calibration.check or calibration.fit)[0]
    fp32, int8 = engine_runs(model, info.name), engine_runs(quantized.model, info.name)
    record["speed"] = speed_record(fp32, int8, batch, "int8")
    _say(record)
    return quantized, record


def _bf16(model: onnx.ModelProto, info: NpuTensorInfo, images: Calibration) -> dict[str, Any]:
    record = measure_bf16(model, info.name, images.check, images.check_images)
    if not record:
        raise UnsupportedError("precision='bf16': bf16 could not be measured against fp32 on "
                               "this model (see the warning above)")  # fmt: skip
    _say(record)
    return record


def _say(record: dict[str, Any]) -> None:
    line = precision_line({KEY: json.dumps(record)})
    speed = record.get("speed", {})
    if speed.get("ratio", 1.0) < 1.0:
        _log.warning("%s", line)  # slower than fp32: never without a line saying so
    else:
        _log.info("%s", line)


def _fastest(
    model: onnx.ModelProto,
    opts: CompileOptions,
    info: NpuTensorInfo,
    float_nodes: tuple[str, ...],
) -> tuple[Quantized | None, dict[str, Any]]:
    """precision='fastest' (module docstring)."""
    if opts.max_drop is not None:
        minimum = 100.0 - opts.max_drop
    else:
        minimum = FASTEST_AGREEMENT if opts.min_agreement is None else opts.min_agreement
    calibration = _calibration(opts, info)
    candidates: dict[str, dict[str, Any]] = {}
    quantized: Quantized | None = None
    try:
        candidates["bf16"] = _bf16(model, info, calibration)
    except UnsupportedError as exc:
        candidates["bf16"] = {"precision": "bf16", "why": str(exc)}
    try:
        quantized, candidates["int8"] = _int8(model, opts, info, calibration, float_nodes,
                                              100.0 - minimum)  # fmt: skip
    except UnsupportedError as exc:
        candidates["int8"] = {"precision": "int8", "why": str(exc)}
    if candidates["int8"]["precision"] == "fp32":  # NNCF declined the model
        why = str(candidates["int8"]["why"]).removeprefix("int8 declined: ")
        candidates["int8"] = {"precision": "int8", "why": why}
    chosen = _choose(candidates, minimum)
    summary = {name: _summary(record, minimum) for name, record in candidates.items()}
    if chosen is None:
        why = "; ".join(f"{name} declined ({text})" for name, text in summary.items())
        return None, {"precision": "fp32", "why": why, "declined": candidates}
    record = dict(candidates[chosen])
    record["fastest"] = {"minimum": minimum, "why": "; ".join(
        f"{name}: {text}" for name, text in summary.items()),
        "candidates": {n: r for n, r in candidates.items() if n != chosen}}  # fmt: skip
    return (quantized if chosen == "int8" else None), record


def _choose(candidates: dict[str, dict[str, Any]], minimum: float) -> str | None:
    """The candidate that agrees well enough and runs fastest, at least FASTER x fp32."""
    fit = {name: record["speed"]["ratio"] for name, record in candidates.items()
           if _summary(record, minimum).startswith("kept")}  # fmt: skip
    return max(fit, key=lambda name: fit[name]) if fit else None


def _summary(record: dict[str, Any], minimum: float) -> str:
    """Why a candidate qualifies (``kept ...``) or not, in a clause."""
    if "why" in record:
        return str(record["why"])
    top1, ratio = record.get("top1"), record.get("speed", {}).get("ratio")
    agrees = "no top-1 figure" if top1 is None else f"top-1 as fp32 on {top1}%"
    figures = (f"{agrees} of {record.get('images')} {record.get('images_from')} images, "
               f"needed {minimum:g}%; {ratio}x fp32's speed, needed {FASTER}x")  # fmt: skip
    if top1 is not None and ratio is not None and top1 >= minimum and ratio >= FASTER:
        return f"kept: {figures}"
    return figures
