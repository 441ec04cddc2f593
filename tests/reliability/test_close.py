"""close() while busy: bounded time, a final status for every job, no copyless thread left.

Regression: a callback that blocked made close() wait for it without limit (the job's
future was forgotten before its callback ran, and the executor was joined unbounded).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import copyless as cl
import copyless.runner._runner as runner_module
from copyless.model import CompiledModel
from copyless.runner import Runner, RunnerFactory
from copyless.runner._execution import Execution

S = cl.StatusCode
HW = cl.TensorType.HW
FINAL = {S.SUCCESS, S.FAILURE}


def _copyless_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("copyless")]


def _pairs(runner: Runner, n: int) -> list[tuple[cl.NpuTensor, cl.NpuTensor]]:
    (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, HW)
    (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, HW)
    return [(runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)) for _ in range(n)]


@pytest.fixture
def short_close(monkeypatch: pytest.MonkeyPatch) -> Iterator[float]:
    monkeypatch.setattr(runner_module, "CLOSE_TIMEOUT_S", 1.0)
    yield 1.0


@pytest.mark.parametrize("order", ["submission", "completion"])
def test_close_with_many_jobs_in_flight(compiled: CompiledModel, order: str) -> None:
    runner = RunnerFactory.from_compiled(
        compiled,
        {"max_concurrent_runs": 64, "async_threadpool_depth": 4, "callback_order": order},
    )
    statuses: dict[int, list[S]] = {}
    lock = threading.Lock()

    def callback(handle: cl.JobHandle) -> None:
        with lock:
            statuses.setdefault(handle.job_id, []).append(handle.status)

    pairs = _pairs(runner, 64)
    handles = [runner.execute_async([[x]], [[y]], callback) for x, y in pairs]
    assert all(h.status is S.SUCCESS for h in handles)
    start = time.monotonic()
    runner.close()
    assert time.monotonic() - start < runner_module.CLOSE_TIMEOUT_S + 2
    # Every job reported once, with a final status; wait agrees with the callback.
    assert sorted(statuses) == [h.job_id for h in handles]
    assert all(len(v) == 1 and v[0] in FINAL for v in statuses.values())
    for h in handles:
        assert runner.wait(h, 0) in (statuses[h.job_id][0], S.INVALID_JOB_ID)
    assert _copyless_threads() == []


@pytest.mark.usefixtures("short_close")
@pytest.mark.parametrize("order", ["submission", "completion"])
def test_close_returns_in_bounded_time_when_a_callback_blocks(
    compiled: CompiledModel, order: str
) -> None:
    runner = RunnerFactory.from_compiled(
        compiled, {"max_concurrent_runs": 4, "callback_order": order, "log_level": "ERROR"}
    )
    release = threading.Event()
    reported: list[int] = []
    pairs = _pairs(runner, 4)
    first = runner.execute_async([[pairs[0][0]]], [[pairs[0][1]]], lambda h: release.wait(60))
    others = [
        runner.execute_async([[x]], [[y]], lambda h: reported.append(h.job_id))
        for x, y in pairs[1:]
    ]
    try:
        time.sleep(0.2)  # let the first callback start blocking
        start = time.monotonic()
        runner.close()
        assert time.monotonic() - start < runner_module.CLOSE_TIMEOUT_S + 2
        if order == "completion":  # the others were not held back by the blocked callback
            assert sorted(reported) == [h.job_id for h in others]
    finally:
        release.set()
    # Once the callback returns, every job reports and the worker threads end.
    assert runner.wait(first, 10_000) in FINAL
    deadline = time.monotonic() + 10
    while (_copyless_threads() or len(reported) < 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(reported) == [h.job_id for h in others]
    assert _copyless_threads() == []


def test_close_from_another_thread_while_sync_calls_run(compiled: CompiledModel) -> None:
    runner = RunnerFactory.from_compiled(compiled, {"log_level": "ERROR"})
    results: list[S] = []
    pairs = _pairs(runner, 3)

    def loop(x: cl.NpuTensor, y: cl.NpuTensor) -> None:
        while True:
            status = runner.execute([[x]], [[y]])
            results.append(status)
            if status is not S.SUCCESS:
                return

    threads = [threading.Thread(target=loop, args=pair) for pair in pairs]
    for t in threads:
        t.start()
    time.sleep(0.2)
    runner.close()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert set(results) <= {S.SUCCESS, S.FAILURE} and results.count(S.FAILURE) == 3
    assert _copyless_threads() == []


def test_close_waits_for_a_sync_call_inside_the_engines(
    compiled: CompiledModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: close() released the engines under a sync call on the Python path (only
    replayed calls and async jobs were waited for); onnxruntime aborted the process now and
    then (SIGABRT in a run whose session was being destroyed)."""
    runner = RunnerFactory.from_compiled(compiled, {"log_level": "ERROR"})
    ((x, y),) = _pairs(runner, 1)
    inside = threading.Event()
    original = Execution.run

    def slow_run(self: Execution, plan: object, caller: object) -> S:
        inside.set()
        time.sleep(0.3)  # a long engine call
        return original(self, plan, caller)  # type: ignore[arg-type]

    monkeypatch.setattr(Execution, "run", slow_run)
    returned: list[tuple[S, float]] = []
    caller = threading.Thread(
        target=lambda: returned.append((runner.execute([[x]], [[y]]), time.monotonic()))
    )
    caller.start()
    assert inside.wait(10)
    runner.close()
    closed_at = time.monotonic()
    caller.join(10)
    ((status, returned_at),) = returned
    assert status is S.SUCCESS  # it was inside before close(): it finishes
    assert returned_at <= closed_at  # and close() waited for it
    assert runner.execute([[x]], [[y]]) is S.FAILURE
    assert _copyless_threads() == []
