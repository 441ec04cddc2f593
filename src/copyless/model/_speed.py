"""How fast a reduced-precision model runs here against its fp32 model, on every engine.

The compiler times both graphs on each engine that loads them (onnxruntime's CPU provider,
OpenVINO's CPU plugin with ``PERFORMANCE_HINT`` LATENCY, fp32 graphs at
``INFERENCE_PRECISION_HINT`` f32 unless asked otherwise), each engine with every core as a
runner's synchronous run has them, in interleaved rounds (:func:`best_round_medians`:
:data:`ROUNDS` rounds of :data:`ROUND_RUNS` runs, the first alternative alternating, each
judged by its best round median) on one batch. The record compares each precision on its
fastest engine, as a runner with ``RunnerType.VAIML`` runs it (``copyless.runner``'s engine
choice)::

    {"fp32_ms": 9.1, "fp32_engine": "onnxruntime", "int8_ms": 3.7, "engine": "openvino",
     "ratio": 2.46, "engines": {"onnxruntime": {"fp32_ms": 9.1, "int8_ms": 4.5},
     "openvino": {"fp32_ms": 9.5, "int8_ms": 3.7}}, "batch": 1, "cpu": "...",
     "load_before": 0.4}
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx

from ..types import UnsupportedError, best_round_medians, cpu_info, openvino_core
from ._shapes import ORT_ERRORS, session

_log = logging.getLogger(__name__)

__all__ = ["ROUNDS", "ROUND_RUNS", "engine_runs", "speed_record"]

ROUNDS = 7
ROUND_RUNS = 3
#: ``run(batch) -> first output``: one model on one engine.
Run = Callable[[np.ndarray], np.ndarray]


def engine_runs(
    model: onnx.ModelProto, name: str, *, openvino_hint: str = "f32", onnxruntime: bool = True
) -> dict[str, Run]:
    """``model``'s first output on each engine that loads it here, fed through input
    ``name``: ``"onnxruntime"`` (unless ``onnxruntime`` is False) and ``"openvino"``
    (compiled at ``openvino_hint``). An engine that refuses the model is left out (said
    at INFO); a missing OpenVINO is left out silently."""
    runs: dict[str, Run] = {}
    if onnxruntime:
        try:
            runs["onnxruntime"] = _ort_run(session(model.SerializeToString()), name)
        except ORT_ERRORS as exc:
            _log.info("onnxruntime cannot load the model to time it: %s", exc)
    core = _core_or_none()
    if core is not None:
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": openvino_hint}
        try:
            compiled = core.compile_model(core.read_model(model=model.SerializeToString()),
                                          "CPU", config)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - OpenVINO raises RuntimeError and others
            _log.info("OpenVINO cannot compile the model to time it: %s", exc)
        else:
            runs["openvino"] = openvino_run(compiled)
    return runs


def _core_or_none() -> Any:
    """An ``openvino.Core``, or None where OpenVINO is not installed or not loadable."""
    try:
        return openvino_core("not timed on OpenVINO")
    except UnsupportedError:
        return None


def openvino_run(compiled: Any) -> Run:
    """A compiled OpenVINO model's first output (copied out of its request)."""
    request = compiled.create_infer_request()

    def run(batch: np.ndarray) -> np.ndarray:
        request.infer({0: batch})
        return np.array(request.get_output_tensor(0).data, copy=True)

    return run


def _ort_run(sess: Any, name: str) -> Run:
    first = sess.get_outputs()[0].name

    def run(batch: np.ndarray) -> np.ndarray:
        return np.asarray(sess.run([first], {name: batch})[0])

    return run


def speed_record(
    reference: Mapping[str, Run], reduced: Mapping[str, Run], batch: np.ndarray, precision: str
) -> dict[str, Any]:
    """The ``speed`` record (module docstring) of ``reduced`` (``{engine: run}``, at
    ``precision``) against the fp32 ``reference`` on ``batch``; empty when either has no
    engine."""
    if not reference or not reduced:
        return {}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    calls = {("fp32", engine): functools.partial(run, batch) for engine, run in reference.items()}
    calls.update({(precision, e): functools.partial(run, batch) for e, run in reduced.items()})
    best = best_round_medians(calls, ROUND_RUNS, lambda done: done < ROUNDS, warm=1)
    engines: dict[str, dict[str, float]] = {}
    for (which, engine), ms in best.items():
        engines.setdefault(engine, {})[f"{which}_ms"] = round(ms, 3)
    fp32_engine = min(reference, key=lambda e: best["fp32", e])
    engine = min(reduced, key=lambda e: best[precision, e])
    fp32_ms, reduced_ms = best["fp32", fp32_engine], best[precision, engine]
    return {
        "fp32_ms": round(fp32_ms, 3), "fp32_engine": fp32_engine,
        f"{precision}_ms": round(reduced_ms, 3), "engine": engine,
        "ratio": round(fp32_ms / reduced_ms, 2), "engines": engines,
        "batch": int(batch.shape[0]), "cpu": cpu_info().name,
        "load_before": None if load is None else round(load, 2),
    }  # fmt: skip
