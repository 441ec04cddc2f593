"""Soak: many sync executions and async jobs on a small real conv net; leaks and lost jobs.

Prints RSS, open fds and live Python objects before (after warm-up) and after, jobs/s for
each phase, and checks that every async job's callback ran exactly once, every ``wait``
returned SUCCESS and every result is right. Exits 1 when a check fails.

    python benchmarks/soak.py                       # 100,000 sync + 20,000 async
    python benchmarks/soak.py --sync 5000 --async-jobs 2000 --threads 4
    python benchmarks/soak.py --size 64 --callback-order completion

Measured on the 2-core dev machine: 100,000 sync runs +0.9 MiB RSS (1,000,000: +0.9 MiB),
fds and objects flat. The async path with 8 threads grows RSS ~17 MiB over the first
~250,000 jobs and then levels off (about 5 MiB of it is the job table's bounded list of
the last 65,536 reported job ids; the rest is allocator growth across threads, with
Python objects flat): raise ``--rss-slack-mib`` for runs of more than ~100,000 async jobs.
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

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


def footprint() -> tuple[int, int, int]:
    gc.collect()
    rss = int(psutil.Process().memory_info().rss)
    return rss, len(os.listdir("/proc/self/fd")), len(gc.get_objects())


def run_sync(runner: Runner, x: cl.NpuTensor, y: cl.NpuTensor, n: int) -> int:
    failures = 0
    for _ in range(n):
        if runner.execute([[x]], [[y]]) is not S.SUCCESS:
            failures += 1
    return failures


def run_async(
    runner: Runner, pairs: list[tuple[cl.NpuTensor, cl.NpuTensor]], per_thread: int
) -> dict[str, Any]:
    """One thread per pair submits (retrying RESOURCE_UNAVAILABLE) and waits each job."""
    calls: collections.Counter[int] = collections.Counter()
    waited: collections.Counter[str] = collections.Counter()
    ids: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(pairs))

    def callback(handle: cl.JobHandle) -> None:
        with lock:
            calls[handle.job_id] += 1

    def worker(x: cl.NpuTensor, y: cl.NpuTensor) -> None:
        barrier.wait()
        for _ in range(per_thread):
            handle = runner.execute_async([[x]], [[y]], callback)
            while handle.status is S.RESOURCE_UNAVAILABLE:
                handle = runner.execute_async([[x]], [[y]], callback)
            status = runner.wait(handle, 60_000) if handle.job_id else handle.status
            with lock:
                ids.append(handle.job_id)
                waited[status.name] += 1

    threads = [threading.Thread(target=worker, args=p) for p in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"calls": calls, "waited": waited, "ids": ids}


def mib(n: int) -> str:
    return f"{n / 2**20:8.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sync", type=int, default=100_000, help="sync executions")
    parser.add_argument("--async-jobs", type=int, default=20_000, help="async jobs in all")
    parser.add_argument("--threads", type=int, default=8, help="threads submitting at once")
    parser.add_argument("--size", type=int, default=16, help="input height and width")
    parser.add_argument("--callback-order", choices=["submission", "completion"],
                        default="submission")  # fmt: skip
    parser.add_argument("--rss-slack-mib", type=float, default=16.0)
    args = parser.parse_args(argv)

    model = conv_net(size=args.size)
    compiled = compile_to_memory(model)
    options = {"max_concurrent_runs": args.threads, "async_threadpool_depth": args.threads,
               "callback_order": args.callback_order}  # fmt: skip
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((1, 3, args.size, args.size)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = np.asarray(session.run(None, {"input": x0})[0])
    problems: list[str] = []
    with RunnerFactory.from_compiled(compiled, options) as runner:
        x, y = tensors(runner, HW)
        pairs = [tensors(runner, HW) for _ in range(args.threads)]
        for tensor in [x] + [p[0] for p in pairs]:
            tensor.numpy()[...] = x0
        run_sync(runner, x, y, 500)
        run_async(runner, pairs, 50)
        before = footprint()

        t0 = time.perf_counter()
        failures = run_sync(runner, x, y, args.sync)
        t_sync = time.perf_counter() - t0
        if failures:
            problems.append(f"{failures} sync execution(s) failed")
        t0 = time.perf_counter()
        result = run_async(runner, pairs, args.async_jobs // args.threads)
        t_async = time.perf_counter() - t0
        after = footprint()

        jobs = (args.async_jobs // args.threads) * args.threads
        calls, ids = result["calls"], result["ids"]
        if len(set(ids)) != jobs or set(calls) != set(ids):
            problems.append(f"jobs: {len(set(ids))} ids, {len(calls)} reported, {jobs} submitted")
        twice = [job for job, n in calls.items() if n != 1]
        if twice:
            problems.append(f"{len(twice)} callback(s) ran other than once")
        if result["waited"] != collections.Counter({"SUCCESS": jobs}):
            problems.append(f"wait statuses: {dict(result['waited'])}")
        for out in [y.numpy()] + [p[1].numpy() for p in pairs]:
            if not np.allclose(out, expected, rtol=1e-5, atol=1e-5):
                problems.append("a result differs from onnxruntime")
                break

    print(f"model: conv net 1x3x{args.size}x{args.size}, {args.threads} async threads, "
          f"callback_order={args.callback_order}")  # fmt: skip
    print(f"sync : {args.sync} runs in {t_sync:.2f} s  ({args.sync / t_sync:,.0f} jobs/s)")
    print(f"async: {jobs} jobs in {t_async:.2f} s  ({jobs / t_async:,.0f} jobs/s)")
    print(
        f"RSS  : {mib(before[0])} -> {mib(after[0])}  ({(after[0] - before[0]) / 2**20:+.1f} MiB)"
    )
    print(f"fds  : {before[1]} -> {after[1]}")
    print(f"objs : {before[2]} -> {after[2]}")
    if after[0] - before[0] > args.rss_slack_mib * 2**20:
        problems.append(f"RSS grew more than {args.rss_slack_mib} MiB")
    if after[1] > before[1]:
        problems.append(f"{after[1] - before[1]} fd(s) leaked")
    for problem in problems:
        print(f"FAIL: {problem}")
    print("OK" if not problems else "FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
