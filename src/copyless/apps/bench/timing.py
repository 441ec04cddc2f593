"""What the benchmark programs share: interleaved timing of callables, and the pure-overhead
model (the suites under ``benchmarks/`` import it from here; see :mod:`.cli`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import onnx
import onnx.helper as oh


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
    """Median over rounds of each variant's median seconds per call, the variants
    alternating round by round (A, B, A, B...) so that machine drift hits them all."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    if warm:
        for fn in fns.values():  # bindings, plans, slots, lazy kernels
            fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            times = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            samples[name].append(statistics.median(times))
    return {k: statistics.median(v) for k, v in samples.items()}
