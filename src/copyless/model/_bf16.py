"""BF16 at a stated price: OpenVINO's BF16 arithmetic measured against fp32 when compiling.

``compile_model(..., precision="bf16", calibration=DIR)`` keeps the graph and its tensors
float32 (BF16 is how OpenVINO computes, not what the tensors hold) and records in the model
that it runs in BF16, with the price measured here: both OpenVINO compilations of the graph
(``INFERENCE_PRECISION_HINT`` f32 and bf16) run on every calibration image, as the model
sees them (nothing is fitted on them), and the agreement of their first outputs is recorded
as INT8's is (:mod:`._precision`), with ``speed`` (:mod:`._speed`): BF16 on OpenVINO against
fp32 on its fastest engine here (onnxruntime or OpenVINO at f32), interleaved timed rounds on
the first batch. ``precision="fastest"`` (:mod:`._fastest`) weighs it against INT8 and fp32.

Only OpenVINO runs BF16 here: onnxruntime's CPU provider has no general BF16 arithmetic. A
CPU without it (OpenVINO's ``OPTIMIZATION_CAPABILITIES`` lacks ``"BF16"``: no AVX512_BF16 and
no AMX) is refused in one line (:func:`copyless.types.bf16_refusal`), by the compiler and by
the runner.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import onnx

from ..types import UnsupportedError, bf16_refusal, cpu_capabilities, openvino_core
from ._precision import measure
from ._speed import engine_runs, openvino_run, speed_record

_log = logging.getLogger(__name__)

#: Fewer images than this give no agreement figure worth a percent (a warning names it).
MIN_IMAGES = 20


def measure_bf16(
    model: onnx.ModelProto, name: str, batches: list[np.ndarray], images: int
) -> dict[str, Any]:
    """The ``precision`` record of ``model`` in BF16 against fp32, both on OpenVINO's CPU
    plugin; UnsupportedError (one line) where this CPU has no BF16 arithmetic."""
    core = _core()
    refusal = bf16_refusal(cpu_capabilities(core))
    if refusal is not None:
        raise UnsupportedError(f"precision='bf16' refused: {refusal}; compile it without")
    try:
        graph = core.read_model(model=model.SerializeToString())
        bf16 = core.compile_model(
            graph, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "bf16"}
        )
    except Exception as exc:
        raise UnsupportedError(
            f"precision='bf16': OpenVINO cannot compile the model: {exc}"
        ) from exc
    if bf16.get_property("INFERENCE_PRECISION_HINT").to_string() != "bf16":
        raise UnsupportedError("precision='bf16': OpenVINO compiled it in another precision")
    fp32 = engine_runs(model, name)
    if "openvino" not in fp32:
        raise UnsupportedError("precision='bf16': OpenVINO cannot compile the model at f32")
    reduced = {"openvino": openvino_run(bf16)}
    record = measure(fp32["openvino"], reduced["openvino"], batches, images, precision="bf16",
                     images_from="calibration", engine="openvino")  # fmt: skip
    if record:
        record["speed"] = speed_record(fp32, reduced, batches[0], "bf16")
    return record


def _core() -> Any:
    return openvino_core("precision='bf16': BF16 runs on OpenVINO only (onnxruntime's CPU "
                         "provider has no BF16 arithmetic)")
