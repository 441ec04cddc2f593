"""First-submit latency: how long the first ``execute_async`` blocks, without and with
``Runner.warm_up()``, and how long the first job takes to complete.

    python benchmarks/first_submit.py [--model efficientnet-lite0] [--rounds 5]

Each round creates a fresh runner per variant (the variants alternate round by round) and
times, on two new tensor pairs: the first submit, the second submit, and the first job's
submit-to-wait time. Prints medians over rounds and the ratio cold / warmed up.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import copyless as cl
from copyless.model import compile_model, zoo
from copyless.model.zoo import cache_root

IN, OUT, HW = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT, cl.TensorType.HW


def one_round(path: Path, runner_type: cl.RunnerType, warm: bool) -> dict[str, float]:
    with cl.RunnerFactory.create_runner(path, {"max_concurrent_runs": 2}, runner_type) as runner:
        (i,), (o,) = runner.get_tensors_info(IN, HW), runner.get_tensors_info(OUT, HW)
        pairs = [(runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)) for _ in "ab"]
        if warm:
            runner.warm_up()
        times = {}
        t0 = time.perf_counter()
        first = runner.execute_async([[pairs[0][0]]], [[pairs[0][1]]])
        times["first submit"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        second = runner.execute_async([[pairs[1][0]]], [[pairs[1][1]]])
        times["second submit"] = time.perf_counter() - t1
        assert runner.wait(first, -1) is cl.StatusCode.SUCCESS
        times["first job done"] = time.perf_counter() - t0
        assert runner.wait(second, -1) is cl.StatusCode.SUCCESS
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="efficientnet-lite0", help="zoo model name")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    path = cache_root() / "bench" / f"{args.model}-first-submit.rai"
    if not path.exists():
        compile_model(zoo.build(args.model), path)
    for runner_type in (cl.RunnerType.ONNXRUNTIME, cl.RunnerType.OPENVINO):
        samples: dict[bool, dict[str, list[float]]] = {False: {}, True: {}}
        for _ in range(args.rounds):
            for warm in (False, True):
                for key, value in one_round(path, runner_type, warm).items():
                    samples[warm].setdefault(key, []).append(value)
        print(f"{args.model} on {runner_type.name.lower()} ({args.rounds} rounds, medians):")
        for key in samples[False]:
            cold = statistics.median(samples[False][key]) * 1e3
            warm = statistics.median(samples[True][key]) * 1e3
            print(f"  {key:15s} cold {cold:9.3f} ms   after warm_up() {warm:9.3f} ms   "
                  f"{cold / warm:6.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
