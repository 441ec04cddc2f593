"""What the benchmark programs share: interleaved timing of callables (copyless's one way,
:func:`copyless.types.round_medians`, summed up by the median round), and the pure-overhead
model (the source checkout's programs under ``benchmarks/`` import it from here)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import onnx
import onnx.helper as oh

from ...types import round_medians


def relu_model() -> onnx.ModelProto:
    """Relu on float [1, 3, 8, 8]: the engine does next to nothing, so a call's time is the
    overhead of whatever drives it."""
    graph = oh.make_graph(
        [oh.make_node("Relu", ["input"], ["output"])],
        "relu",
        [oh.make_tensor_value_info("input", 1, [1, 3, 8, 8])],
        [oh.make_tensor_value_info("output", 1, [1, 3, 8, 8])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def interleaved(
    fns: dict[str, Callable[[], object]], reps: int, rounds: int, *, warm: bool = True
) -> dict[str, float]:
    """Median over ``rounds`` rounds of each variant's median seconds per call, the variants
    alternating round by round so that machine drift hits them all; with ``warm``, one
    untimed call of each first (bindings, plans, slots, lazy kernels)."""
    found = round_medians(fns, reps, lambda done: done < rounds, warm=1 if warm else 0)
    return {name: statistics.median(figures) for name, figures in found.items()}
