"""The default runner (RunnerType.VAIML) against each engine forced, per model.

    python benchmarks/engine_choice.py [--models efficientnet-lite0,resnet50,ppocr-det]
                                 [--runs 30] [--rounds 3]

Each model is the benchmark suite's RGBx b1 fp32 ``.rai`` (ppocr-det at 640x640). For each
model: the first ``create_runner`` with the default runner type measures both engines (its
time, measurement included, is printed: the budget is 2 s; interleaved rounds, best round per
engine, a busy machine said in the reason), with an empty choice cache (a
temporary COPYLESS_CACHE_DIR); a second one reads the cache. Then, round by round, the three
runners (vaiml, onnxruntime, openvino) each run ``--runs`` timed ``execute`` calls on
runner-allocated zero-copy tensors, alternating, and the medians over all calls are printed
with the ratios forced-engine / vaiml (>= 1.00 means the default is at least as fast).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import copyless as cl
from copyless.apps.bench.models import Config, copyless_model

IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
TYPES = (cl.RunnerType.VAIML, cl.RunnerType.ONNXRUNTIME, cl.RunnerType.OPENVINO)


def timed_calls(runner: cl.Runner, runs: int) -> list[float]:
    ins = [runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(IN)]
    outs = [runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(OUT)]
    assert runner.execute([ins], [outs]) is cl.StatusCode.SUCCESS  # untimed first run
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        runner.execute([ins], [outs])
        times.append(time.perf_counter() - t0)
    return times


def one_model(name: str, path: Path, runs: int, rounds: int) -> None:
    t0 = time.perf_counter()
    first = cl.RunnerFactory.create_runner(path)
    created = time.perf_counter() - t0
    first.close()
    t0 = time.perf_counter()
    runners = {cl.RunnerType.VAIML: cl.RunnerFactory.create_runner(path)}
    cached = time.perf_counter() - t0
    for runner_type in TYPES[1:]:
        runners[runner_type] = cl.RunnerFactory.create_runner(path, None, runner_type)
    vaiml = runners[cl.RunnerType.VAIML]
    print(f"{name} (rgbx fp32 b1): vaiml chose {vaiml.get_property('engine')}: "
          f"{vaiml.engine_reason}")  # fmt: skip
    print(f"  first create_runner (measures) {created:.2f} s; second (cached) {cached:.2f} s")
    samples: dict[cl.RunnerType, list[float]] = {t: [] for t in TYPES}
    try:
        for _ in range(rounds):
            for runner_type, runner in runners.items():
                samples[runner_type] += timed_calls(runner, runs)
    finally:
        for runner in runners.values():
            runner.close()
    medians = {t: statistics.median(s) * 1e3 for t, s in samples.items()}
    base = medians[cl.RunnerType.VAIML]
    for runner_type in TYPES:
        ms = medians[runner_type]
        print(f"  {runner_type.name.lower():12s} median {ms:8.3f} ms   {ms / base:5.2f}x vaiml")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="efficientnet-lite0,resnet50,ppocr-det")
    parser.add_argument("--runs", type=int, default=30, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    paths = [copyless_model(Config(m, "fp32", 1)) for m in models]  # built before timing
    with tempfile.TemporaryDirectory() as empty:
        cache = os.environ.get("COPYLESS_CACHE_DIR")
        # models stay in the real cache (paths above); the choices start from nothing
        os.environ["COPYLESS_CACHE_DIR"] = empty
        try:
            for name, path in zip(models, paths, strict=True):
                one_model(name, path, args.runs, args.rounds)
        finally:
            if cache is None:
                del os.environ["COPYLESS_CACHE_DIR"]
            else:
                os.environ["COPYLESS_CACHE_DIR"] = cache


if __name__ == "__main__":
    main()
