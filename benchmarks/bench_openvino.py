"""copyless on OpenVINO vs OpenVINO's own Python pipeline vs copyless on ONNX Runtime.

    python benchmarks/bench_openvino.py [--quick] [--runner onnxruntime openvino]
        [--models relu efficientnet-lite0 resnet50] [--hint LATENCY|THROUGHPUT|AUTO]

For each model (the same compiled graph everywhere, batch 1, float32 HW views), in one run:

* sync, ms per frame (median of interleaved rounds):
  raw OpenVINO ``InferRequest.infer({0: x}, share_inputs=True, share_outputs=True)``,
  copyless ``execute`` on OpenVINO, copyless ``execute`` on ONNX Runtime;
* async with 2 in flight, ms per frame of a block of jobs:
  raw ``AsyncInferQueue(compiled, 2).start_async({0: x}, share_inputs=True)`` + ``wait_all``,
  copyless ``execute_async`` (``max_concurrent_runs=2``) + ``wait`` on OpenVINO and on
  ONNX Runtime.

Ratios are copyless over raw OpenVINO (the overhead; target <= 1.1x) and ONNX Runtime over
OpenVINO. ``relu`` (a 1x3x8x8 Relu) shows the pure per-call overhead in microseconds.
``--runner`` picks which copyless backends run (both by default). Machines here are shared
and noisy: every figure is a median over rounds that alternate between the variants.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

import copyless as cl
from copyless.apps.bench.timing import interleaved, relu_model

# The openvino package through copyless (typed Any: it ships no stubs); tools that put this
# folder on their path would take a plain ``import openvino`` for this file.
from copyless.backends import _openvino_tensors
from copyless.model import CompiledModel, compile_to_memory, zoo
from copyless.runner import Runner, RunnerOptions

ov: Any = _openvino_tensors.ov

HW = cl.TensorType.HW
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
RAW = "raw OpenVINO"


@dataclass(frozen=True, slots=True)
class Setup:
    threads: int
    hint: str
    rounds: int
    block_s: float


def load(name: str) -> CompiledModel:
    if name == "relu":
        return compile_to_memory(relu_model())
    return compile_to_memory(onnx.load(str(zoo.build(name, progress=False))))


def raw_openvino(compiled: CompiledModel, setup: Setup) -> Any:
    """The same graph compiled the way the copyless backend compiles it."""
    config: dict[str, Any] = {
        "PERFORMANCE_HINT": setup.hint if setup.hint != "AUTO" else "THROUGHPUT",
        "INFERENCE_NUM_THREADS": setup.threads,
    }
    if config["PERFORMANCE_HINT"] == "THROUGHPUT":
        config["PERFORMANCE_HINT_NUM_REQUESTS"] = 2
    core = ov.Core()
    return core.compile_model(core.read_model(compiled.partitions[0].onnx_bytes), "CPU", config)


def copyless_runner(compiled: CompiledModel, backend: str, setup: Setup) -> Runner:
    options: dict[str, Any] = {"num_threads": setup.threads, "max_concurrent_runs": 2}
    if backend == "openvino":
        options["performance_hint"] = setup.hint
        return cl.RunnerFactory.from_compiled(compiled, options, cl.RunnerType.OPENVINO)
    return cl.RunnerFactory.from_compiled(compiled, options, cl.RunnerType.ONNXRUNTIME)


def pairs(runner: Runner, data: np.ndarray) -> list[tuple[cl.NpuTensor, cl.NpuTensor]]:
    """Two input/output tensor pairs (one per slot) filled with ``data``."""
    made = []
    for _ in range(2):
        x = runner.allocate_npu_tensor(runner.get_tensors_info(IN, HW)[0])
        y = runner.allocate_npu_tensor(runner.get_tensors_info(OUT, HW)[0])
        x.numpy()[...] = data
        made.append((x, y))
    return made


def sync_fns(
    compiled_ov: Any, runners: dict[str, Runner], data: np.ndarray
) -> dict[str, Callable[[], object]]:
    request = compiled_ov.create_infer_request()
    x = data.copy()
    fns: dict[str, Callable[[], object]] = {
        RAW: lambda: request.infer({0: x}, share_inputs=True, share_outputs=True)
    }
    for name, runner in runners.items():
        (xt, yt), _ = pairs(runner, data)
        fns[f"copyless/{name}"] = _copyless_sync(runner, [[xt]], [[yt]])
    return fns


def _copyless_sync(runner: Runner, inputs: Any, outputs: Any) -> Callable[[], object]:
    return lambda: runner.execute(inputs, outputs)


def async_fns(
    compiled_ov: Any, runners: dict[str, Runner], data: np.ndarray, jobs: int
) -> dict[str, Callable[[], object]]:
    queue = ov.AsyncInferQueue(compiled_ov, 2)
    frames = [data.copy(), data.copy()]

    def raw() -> None:
        for i in range(jobs):
            queue.start_async({0: frames[i % 2]}, share_inputs=True)
        queue.wait_all()

    fns: dict[str, Callable[[], object]] = {RAW: raw}
    for name, runner in runners.items():
        fns[f"copyless/{name}"] = _copyless_async(runner, pairs(runner, data), jobs)
    return fns


def _copyless_async(
    runner: Runner, slots: list[tuple[cl.NpuTensor, cl.NpuTensor]], jobs: int
) -> Callable[[], None]:
    calls = [([[x]], [[y]]) for x, y in slots]

    def run() -> None:
        pending: list[cl.JobHandle] = []
        for i in range(jobs):
            if len(pending) == 2:
                runner.wait(pending.pop(0), -1)
            handle = runner.execute_async(*calls[i % 2])
            if handle.status is not cl.StatusCode.SUCCESS:
                raise RuntimeError(f"execute_async refused: {handle.status}")
            pending.append(handle)
        for handle in pending:
            runner.wait(handle, -1)

    return run


def report(title: str, results: dict[str, float], per_frame: int) -> None:
    base = results[RAW]
    unit, scale = ("us", 1e6) if base / per_frame < 1e-3 else ("ms", 1e3)
    print(f"\n[{title}] {unit} per frame, ratio to raw OpenVINO")
    for name, seconds in results.items():
        value = seconds / per_frame * scale
        print(f"  {name:<22}{value:10.3f} {unit}   {seconds / base:5.2f}x")
    if "copyless/openvino" in results and "copyless/onnxruntime" in results:
        ratio = results["copyless/onnxruntime"] / results["copyless/openvino"]
        print(f"  onnxruntime / openvino (copyless): {ratio:5.2f}x")


def bench_model(name: str, backends: list[str], setup: Setup) -> None:
    compiled = load(name)
    info = compiled.inputs[0].hw
    data = np.random.default_rng(0).standard_normal(info.shape).astype(info.numpy_dtype)
    compiled_ov = raw_openvino(compiled, setup)
    runners = {b: copyless_runner(compiled, b, setup) for b in backends}
    try:
        start = time.perf_counter()
        compiled_ov.create_infer_request().infer({0: data})
        once = max(time.perf_counter() - start, 1e-5)
        reps = max(3, min(2000, int(setup.block_s / once)))
        report(
            f"{name} sync", interleaved(sync_fns(compiled_ov, runners, data), reps, setup.rounds), 1
        )
        jobs = max(4, min(400, int(setup.block_s / once)))
        fns = async_fns(compiled_ov, runners, data, jobs)
        report(f"{name} async x2, {jobs} jobs", interleaved(fns, 1, setup.rounds), jobs)
    finally:
        for runner in runners.values():
            runner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument(
        "--runner",
        nargs="+",
        choices=["onnxruntime", "openvino"],
        default=["openvino", "onnxruntime"],
        help="copyless backends to measure beside raw OpenVINO (default: both)",
    )
    parser.add_argument("--models", nargs="+", default=["relu", "efficientnet-lite0", "resnet50"])
    parser.add_argument("--hint", default="LATENCY", choices=["LATENCY", "THROUGHPUT", "AUTO"])
    parser.add_argument("--threads", type=int, default=0, help="engine threads (0: all cores)")
    parser.add_argument("--rounds", type=int, default=0, help="interleaved rounds (7; 3 quick)")
    parser.add_argument("--block", type=float, default=0.0, help="seconds per block (1; 0.3)")
    args = parser.parse_args()
    threads = args.threads or RunnerOptions().engine_threads()
    rounds = args.rounds or (3 if args.quick else 7)
    setup = Setup(threads, args.hint, rounds, args.block or (0.3 if args.quick else 1.0))
    print(
        f"OpenVINO {ov.get_version()}, {threads} engine thread(s), hint {args.hint}, "
        f"{setup.rounds} interleaved rounds"
    )
    for name in args.models:
        bench_model(name, args.runner, setup)


if __name__ == "__main__":
    main()
