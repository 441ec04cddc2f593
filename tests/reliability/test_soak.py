"""Soak and load, short version (the long one is ``benchmarks/soak.py``).

3,000 sync executions and 1,000 async jobs submitted by 8 threads at once on the small conv
net: after warm-up RSS, open fds and live Python objects stay flat; every callback runs
exactly once; no job is lost or reported twice; every ``wait`` says SUCCESS; every result
is right.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import os
import threading

import numpy as np
import onnx
import onnxruntime as ort
from reliability_helpers import rss_bytes

import copyless as cl
from copyless.model import CompiledModel
from copyless.runner import Runner, RunnerFactory

S = cl.StatusCode
HW = cl.TensorType.HW
SYNC_RUNS, ASYNC_JOBS, THREADS = 3000, 1000, 8
RSS_SLACK = 8 << 20
OBJECT_SLACK = 2000
_LIBC = ctypes.CDLL(None)


def _pair(runner: Runner) -> tuple[cl.NpuTensor, cl.NpuTensor]:
    (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, HW)
    (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, HW)
    return runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)


def _footprint() -> tuple[int, int, int]:
    gc.collect()
    # Hand glibc's free heap pages back first: RSS then counts live memory, not what the
    # allocator keeps cached (how much depends on what earlier tests in the process did to
    # its trim/mmap thresholds: up to 15 MiB here after the Ray and OpenVINO tests).
    _LIBC.malloc_trim(0)
    return rss_bytes(), len(os.listdir("/proc/self/fd")), len(gc.get_objects())


def _async_load(
    runner: Runner, pairs: list[tuple[cl.NpuTensor, cl.NpuTensor]], jobs_per_thread: int
) -> dict[str, object]:
    """One thread per pair submits at once (retrying RESOURCE_UNAVAILABLE) and waits."""
    calls: collections.Counter[int] = collections.Counter()
    callback_status: dict[int, S] = {}
    waited: list[S] = []
    submitted: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(len(pairs))

    def callback(handle: cl.JobHandle) -> None:
        with lock:
            calls[handle.job_id] += 1
            callback_status[handle.job_id] = handle.status

    def worker(x: cl.NpuTensor, y: cl.NpuTensor) -> None:
        start.wait()
        for _ in range(jobs_per_thread):
            while True:
                handle = runner.execute_async([[x]], [[y]], callback)
                if handle.status is not S.RESOURCE_UNAVAILABLE:
                    break
            assert handle.status is S.SUCCESS
            status = runner.wait(handle, 30_000)
            with lock:
                submitted.append(handle.job_id)
                waited.append(status)

    threads = [threading.Thread(target=worker, args=pair) for pair in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    outputs = [y.numpy().copy() for _x, y in pairs]
    return {"calls": calls, "callback_status": callback_status, "waited": waited,
            "submitted": submitted, "outputs": outputs}  # fmt: skip


def test_soak_sync_and_async_flat_and_exact(compiled: CompiledModel, net: onnx.ModelProto) -> None:
    x0 = np.random.default_rng(7).standard_normal((1, 3, 8, 8)).astype(np.float32)
    session = ort.InferenceSession(net.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = np.asarray(session.run(None, {"input": x0})[0])
    options = {"max_concurrent_runs": THREADS, "async_threadpool_depth": THREADS}
    with RunnerFactory.from_compiled(compiled, options) as runner:
        x, y = _pair(runner)
        # The runner caches call plans by tensor identity (they hold the tensors): the same
        # tensors are reused, as a real loop does.
        pairs = [_pair(runner) for _ in range(THREADS)]
        for tensor in [x] + [p[0] for p in pairs]:
            tensor.numpy()[...] = x0
        # Warm-up: slots, staging, plan caches, thread pool, allocator arenas.
        for _ in range(300):
            assert runner.execute([[x]], [[y]]) is S.SUCCESS
        _async_load(runner, pairs, 40)
        before = _footprint()

        for _ in range(SYNC_RUNS):
            y.numpy()[...] = 0
            assert runner.execute([[x]], [[y]]) is S.SUCCESS
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)
        result = _async_load(runner, pairs, ASYNC_JOBS // THREADS)
        after = _footprint()

        submitted = result["submitted"]
        assert isinstance(submitted, list) and len(submitted) == ASYNC_JOBS
        assert len(set(submitted)) == ASYNC_JOBS  # no id handed out twice
        calls = result["calls"]
        assert isinstance(calls, collections.Counter)
        assert set(calls) == set(submitted) and set(calls.values()) == {1}  # exactly once
        assert result["waited"] == [S.SUCCESS] * ASYNC_JOBS
        statuses = result["callback_status"]
        assert isinstance(statuses, dict) and set(statuses.values()) == {S.SUCCESS}
        for out in result["outputs"]:  # type: ignore[attr-defined]
            np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
        assert runner.get_property("jobs_in_flight") == 0
        assert runner.get_property("callback_errors") == 0

    rss, fds, objects = (a - b for a, b in zip(after, before, strict=True))
    assert rss < RSS_SLACK, f"RSS grew {rss / 2**20:.1f} MiB over {SYNC_RUNS + ASYNC_JOBS} runs"
    assert fds <= 0, f"{fds} fd(s) leaked"
    assert objects < OBJECT_SLACK, f"{objects} Python objects more after the soak"
