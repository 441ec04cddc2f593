"""Rotation soak (issue 33 item 1): K output buffers rotated over M async slots, 10^6 jobs.

Each job is submitted with no wait, retried on RESOURCE_UNAVAILABLE, on the next buffer in
turn (inputs and outputs both rotate). Since capacity comes back in submission order, an
admitted job never finds its buffer bound to an earlier job: any other refusal is spurious
and the run fails (exit 1). Prints jobs/s, the refusals by status, RSS before (after warm-up)
and after, the buffers' final answers checked against plain onnxruntime, and the memory a
finished job nobody waits for keeps in the job table (at most ``MAX_UNCOLLECTED`` of them),
measured with tracemalloc over a separate batch of jobs.

    python benchmarks/rotation.py                          # 1,000,000 jobs, 4 buffers, 2 slots
    python benchmarks/rotation.py --jobs 100000 --buffers 2 --slots 2
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import onnxruntime as ort
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import copyless as cl
from copyless.model import compile_to_memory
from copyless.runner import Runner, RunnerFactory
from model_helpers import conv_net, tensors

S = cl.StatusCode
HW = cl.TensorType.HW
Pair = tuple[cl.NpuTensor, cl.NpuTensor]


def rotate(runner: Runner, pairs: list[Pair], jobs: int) -> tuple[collections.Counter[str], list]:
    """Submit ``jobs`` jobs over ``pairs`` in turn; every answer counted, the last handles."""
    seen: collections.Counter[str] = collections.Counter()
    last: list[cl.JobHandle] = []
    for i in range(jobs):
        x, y = pairs[i % len(pairs)]
        while True:
            handle = runner.execute_async([[x]], [[y]])
            seen[handle.status.name] += 1
            if handle.status is not S.RESOURCE_UNAVAILABLE:
                break
            time.sleep(0)  # hand the GIL to the workers
        last = [*last[-len(pairs) + 1 :], handle] if len(pairs) > 1 else [handle]
    return seen, last


def rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


def retained_bytes(runner: Runner, pairs: list[Pair], jobs: int) -> float:
    """Bytes the job table keeps per finished, never-collected job (tracemalloc)."""
    rotate(runner, pairs, 1000)  # steady state first
    deadline = time.monotonic() + 30
    while runner.get_property("jobs_in_flight") and time.monotonic() < deadline:
        time.sleep(0.001)
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.take_snapshot()
    _, last = rotate(runner, pairs, jobs)
    for handle in last[:-1]:
        runner.wait(handle, 60_000)  # collected: not counted
    while runner.get_property("jobs_in_flight") and time.monotonic() < deadline + 60:
        time.sleep(0.001)
    gc.collect()
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(start, "filename"))
    tracemalloc.stop()
    return grown / jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--buffers", type=int, default=4, help="output buffers rotated (K)")
    parser.add_argument("--slots", type=int, default=2, help="max_concurrent_runs (M)")
    parser.add_argument("--size", type=int, default=8, help="input height and width")
    parser.add_argument("--retained-jobs", type=int, default=20_000)
    args = parser.parse_args(argv)
    if args.buffers < args.slots:
        parser.error("--buffers must be >= --slots (fewer buffers than slots is misuse)")

    model = conv_net(size=args.size)
    options = {"max_concurrent_runs": args.slots, "num_threads": 1}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    with RunnerFactory.from_compiled(compile_to_memory(model), options) as runner:
        pairs = [tensors(runner, HW) for _ in range(args.buffers)]
        for x, _ in pairs:
            x.numpy()[...] = rng.standard_normal(x.info.shape)
        runner.warm_up()
        rotate(runner, pairs, 2000)
        before = rss()
        t0 = time.perf_counter()
        seen, last = rotate(runner, pairs, args.jobs)
        seconds = time.perf_counter() - t0
        statuses = [runner.wait(handle, 60_000) for handle in last]
        after = rss()
        wrong = sum(
            not np.allclose(y.numpy(), session.run(None, {"input": x.numpy()})[0], 1e-4, 1e-4)
            for x, y in pairs
        )
        per_job = retained_bytes(runner, pairs, args.retained_jobs)
    refused = {k: v for k, v in seen.items() if k not in ("SUCCESS", "RESOURCE_UNAVAILABLE")}
    retried = seen["RESOURCE_UNAVAILABLE"]
    grown = (after - before) / 2**20
    rate = args.jobs / seconds
    print(f"{args.jobs:,} jobs, {args.buffers} buffers over {args.slots} slots: {rate:,.0f} jobs/s")
    print(f"  admitted {seen['SUCCESS']:,}; RESOURCE_UNAVAILABLE (retried) {retried:,}")
    print(f"  spurious refusals: {sum(refused.values())} {refused}")
    print(f"  RSS before {before / 2**20:.1f} MiB, after {after / 2**20:.1f} MiB, {grown:+.1f} MiB")
    print(f"  final answers wrong: {wrong} of {len(pairs)}; last: {[s.name for s in statuses]}")
    print(f"  memory per retained finished job: {per_job:.0f} bytes (tracemalloc, "
          f"{args.retained_jobs:,} jobs never waited)")  # fmt: skip
    ok = not refused and not wrong and seen["SUCCESS"] == args.jobs
    ok = ok and all(s is S.SUCCESS for s in statuses)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
