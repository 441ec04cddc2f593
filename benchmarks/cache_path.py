"""Runner creation time with and without the ``cache_path`` engine cache, side by side.

    python benchmarks/cache_path.py [--models efficientnet-lite0,resnet50,ppocr-det]
                                              [--rounds 5]

For each model and engine: the first load with an empty cache (it stores), then interleaved
rounds of ``create_runner`` without a cache and with the warm cache. Prints medians and the
speed-up of the second load, and checks that both runners compute the same outputs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import copyless as cl
from copyless.model import compile_model, zoo
from copyless.model.zoo import cache_root

IN, OUT, HW = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT, cl.TensorType.HW


def create(path: Path, runner_type: cl.RunnerType, cache: Path | None) -> tuple[float, cl.Runner]:
    options = {} if cache is None else {"cache_path": str(cache)}
    start = time.perf_counter()
    runner = cl.RunnerFactory.create_runner(path, options, runner_type)
    return time.perf_counter() - start, runner


def outputs(runner: cl.Runner) -> list[np.ndarray]:
    ins = [runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(IN, HW)]
    outs = [runner.allocate_npu_tensor(o) for o in runner.get_tensors_info(OUT, HW)]
    for tensor in ins:
        tensor.bytes_view()[:] = np.random.default_rng(0).integers(0, 255, tensor.nbytes)
        if tensor.info.data_type.to_numpy().kind == "f":
            tensor.numpy()[...] = np.random.default_rng(0).random(tensor.info.shape)
    assert runner.execute([ins], [outs]) is cl.StatusCode.SUCCESS
    return [t.numpy().copy() for t in outs]


def measure(name: str, runner_type: cl.RunnerType, rounds: int) -> None:
    path = cache_root() / "bench" / f"{name}-cache-path.rai"
    if not path.exists():
        shapes = {"x": (1, 3, 640, 640)} if name == "ppocr-det" else None
        compile_model(zoo.build(name), path, input_shapes=shapes)
    cache = Path(tempfile.mkdtemp(prefix="copyless-cache-bench-"))
    try:
        first, runner = create(path, runner_type, cache)
        stored = runner.get_property("engine_cache")
        runner.close()
        plain: list[float] = []
        cached: list[float] = []
        for _ in range(rounds):
            seconds, runner = create(path, runner_type, None)
            plain.append(seconds)
            reference = outputs(runner)
            runner.close()
            seconds, runner = create(path, runner_type, cache)
            cached.append(seconds)
            assert runner.get_property("engine_cache")["hits"] >= 1
            for got, want in zip(outputs(runner), reference, strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
            runner.close()
        p, c = statistics.median(plain) * 1e3, statistics.median(cached) * 1e3
        print(f"{name:18s} {runner_type.name.lower():11s} no cache {p:8.1f} ms   "
              f"first (stores {stored['stored']}) {first * 1e3:8.1f} ms   "
              f"second {c:8.1f} ms   {p / c:5.1f}x")  # fmt: skip
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="efficientnet-lite0,resnet50,ppocr-det")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for name in args.models.split(","):
        for runner_type in (cl.RunnerType.ONNXRUNTIME, cl.RunnerType.OPENVINO):
            measure(name, runner_type, args.rounds)


if __name__ == "__main__":
    main()
