"""BF16 at a stated price: OpenVINO's BF16 arithmetic measured against fp32 when compiling.

``compile_model(..., precision="bf16", calibration=DIR)`` keeps the graph and its tensors
float32 (BF16 is how OpenVINO computes, not what the tensors hold) and records in the model
that it runs in BF16, with the price measured here: both OpenVINO compilations of the graph
(``INFERENCE_PRECISION_HINT`` f32 and bf16) run on every calibration image, as the model
sees them (nothing is fitted on them), and the agreement of their first outputs is recorded
as INT8's is (:mod:`._precision`), with ``speed``: interleaved timed rounds of both on the
first batch (:data:`ROUNDS` rounds of :data:`ROUND_RUNS` runs; each precision's best round
median; the machine's load average beside it). ``precision="fastest"`` measures the same and
keeps BF16 only when its top-1 agreement is at least ``min_agreement`` (default
:data:`FASTEST_AGREEMENT` percent) and it runs at least :data:`FASTER` times fp32's speed;
otherwise the model stays fp32 and its record says why.

Only OpenVINO runs BF16 here: onnxruntime's CPU provider has no general BF16 arithmetic. A
CPU without it (OpenVINO's ``OPTIMIZATION_CAPABILITIES`` lacks ``"BF16"``: no AVX512_BF16 and
no AMX) is refused in one line (:func:`bf16_refusal`), by the compiler and by the runner.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx

from ..types import UnsupportedError, cpu_info, openvino_unloadable
from ._precision import Run, measure
from ._rounds import best_round_medians

_log = logging.getLogger(__name__)

#: OpenVINO's name of the capability (``OPTIMIZATION_CAPABILITIES`` of the CPU plugin).
BF16 = "BF16"
#: ``precision="fastest"``: the top-1 agreement BF16 needs by default (percent)...
FASTEST_AGREEMENT = 99.5
#: ... and the speed it must reach, in times fp32's.
FASTER = 1.05
ROUNDS = 7
ROUND_RUNS = 3
#: Fewer images than this give no agreement figure worth a percent.
MIN_IMAGES = 20


def cpu_capabilities(core: Any = None) -> tuple[str, ...]:
    """OpenVINO's ``OPTIMIZATION_CAPABILITIES`` of the CPU plugin (``"FP32"``, ``"BF16"``,
    ``"INT8"``...), asked of ``core`` (an ``openvino.Core``; a new one when None:
    UnsupportedError without the ``openvino`` package)."""
    if core is None:
        core = _core()
    return tuple(str(c) for c in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def bf16_available() -> bool:
    """Whether OpenVINO is installed and computes BF16 on this CPU (never raises)."""
    try:
        return bf16_refusal(cpu_capabilities()) is None
    except (UnsupportedError, RuntimeError):
        return False


def bf16_refusal(capabilities: Iterable[str]) -> str | None:
    """Why BF16 is refused on a CPU whose OpenVINO ``capabilities`` lack it (a clause for
    one error line); None when the CPU has BF16 arithmetic."""
    listed = [str(c) for c in capabilities]
    if BF16 in listed:
        return None
    return (
        f"this CPU ({cpu_info().name}) has no BF16 arithmetic (OpenVINO's "
        f"OPTIMIZATION_CAPABILITIES: {', '.join(listed) or 'none'}; BF16 needs AVX512_BF16 or "
        "AMX)"
    )


def measure_bf16(
    model: onnx.ModelProto, name: str, batches: list[np.ndarray], images: int
) -> dict[str, Any]:
    """The ``precision`` record of ``model`` in BF16 against fp32, both on OpenVINO's CPU
    plugin; UnsupportedError (one line) where this CPU has no BF16 arithmetic."""
    refusal = bf16_refusal(cpu_capabilities())
    if refusal is not None:
        raise UnsupportedError(f"precision='bf16' refused: {refusal}; compile it without")
    core = _core()
    try:
        graph = core.read_model(model=model.SerializeToString())
        f32, bf16 = (
            core.compile_model(
                graph, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": p}
            )
            for p in ("f32", "bf16")
        )
    except Exception as exc:
        raise UnsupportedError(
            f"precision='bf16': OpenVINO cannot compile the model: {exc}"
        ) from exc
    if bf16.get_property("INFERENCE_PRECISION_HINT").to_string() != "bf16":
        raise UnsupportedError("precision='bf16': OpenVINO compiled it in another precision")
    runs = {"fp32": _run(f32), "bf16": _run(bf16)}
    record = measure(runs["fp32"], runs["bf16"], batches, images, precision="bf16",
                     images_from="calibration", engine="openvino")  # fmt: skip
    if record:
        record["speed"] = _speed(runs, batches[0])
    return record


def _run(compiled: Any) -> Run:
    request = compiled.create_infer_request()

    def run(batch: np.ndarray) -> np.ndarray:
        request.infer({0: batch})
        return np.array(request.get_output_tensor(0).data, copy=True)

    return run


def _speed(runs: dict[str, Run], batch: np.ndarray) -> dict[str, Any]:
    """Interleaved rounds (the precision going first alternating), each precision judged by
    its best round median, as the engine choice judges engines."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    calls = {key: functools.partial(run, batch) for key, run in runs.items()}
    best = best_round_medians(calls, ROUND_RUNS, lambda done: done < ROUNDS, warm=1)
    return {
        "fp32_ms": round(best["fp32"], 3),
        "bf16_ms": round(best["bf16"], 3),
        "ratio": round(best["fp32"] / best["bf16"], 2),
        "batch": int(batch.shape[0]),
        "cpu": cpu_info().name,
        "load_before": None if load is None else round(load, 2),
    }


def _core() -> Any:
    unloadable = openvino_unloadable()
    if unloadable:
        raise UnsupportedError(f"precision='bf16': BF16 runs on OpenVINO only, and {unloadable}")
    try:
        import openvino as ov
    except ImportError as exc:
        raise UnsupportedError(
            "precision='bf16': BF16 runs on OpenVINO only (onnxruntime's CPU provider has no "
            "BF16 arithmetic), and openvino is not installed: pip install copyless[openvino]"
        ) from exc
    return ov.Core()
