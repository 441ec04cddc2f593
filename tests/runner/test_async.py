"""Asynchronous execution: job ids, wait, callbacks, back-pressure, busy outputs, close."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnxruntime as ort
import pytest
from runner_helpers import conv_net, reference, tensors

import copyless as cl
from copyless.model import compile_to_memory

HW = cl.TensorType.HW
S = cl.StatusCode


def _slots(runner, n):
    return [tensors(runner, HW) for _ in range(n)]


def test_async_results_equal_sync(tiny, make_runner) -> None:
    model, compiled = tiny
    runner = make_runner(compiled, max_concurrent_runs=2)
    rng = np.random.default_rng(0)
    slots = _slots(runner, 2)
    handles = []
    for x, y in slots:
        x.numpy()[...] = rng.standard_normal(x.info.shape)
        handle = runner.execute_async([[x]], [[y]])
        assert handle.status is S.SUCCESS and handle.job_id >= 1
        handles.append(handle)
    for handle in handles:
        assert runner.wait(handle, 5000) is S.SUCCESS
        assert runner.wait(handle, 0) is S.INVALID_JOB_ID  # collected
    for x, y in slots:
        (expected,) = reference(model, {"input": x.numpy().copy()})
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)


def _hold_jobs(runner):
    """Make every job wait inside its engine call until the returned event is set."""
    release = threading.Event()
    execution = runner._execution
    original_run = execution.run

    def slow_run(plan, caller):
        release.wait(10)
        return original_run(plan, caller)

    execution.run = slow_run
    return release


def test_back_pressure_is_reported_while_jobs_run(tiny, make_runner) -> None:
    runner = make_runner(tiny[1], max_concurrent_runs=2)
    release = _hold_jobs(runner)
    slots = _slots(runner, 3)
    statuses = [runner.execute_async([[x]], [[y]]) for x, y in slots]
    assert [h.status for h in statuses[:2]] == [S.SUCCESS, S.SUCCESS]
    assert statuses[2].status is S.RESOURCE_UNAVAILABLE and statuses[2].job_id == 0
    release.set()
    for handle in statuses[:2]:
        assert runner.wait(handle, 10000) is S.SUCCESS
    x, y = slots[2]
    retry = runner.execute_async([[x]], [[y]])  # a slot is free again after wait
    assert retry.status is S.SUCCESS and runner.wait(retry, 10000) is S.SUCCESS


def test_wait_timeout_and_unknown_jobs(make_runner) -> None:
    runner = make_runner(compile_to_memory(conv_net(size=256)))
    x, y = tensors(runner, HW)
    gate = threading.Event()
    handle = runner.execute_async([[x]], [[y]], callback=lambda h: gate.wait(5))
    assert runner.wait(handle, 0) is S.JOB_PENDING  # callback blocked: not reported yet
    assert runner.wait(handle, 20) is S.JOB_PENDING
    gate.set()
    assert runner.wait(handle, -1) is S.SUCCESS  # negative: no limit
    assert runner.wait(cl.JobHandle(S.SUCCESS, 0), 0) is S.INVALID_JOB_ID
    assert runner.wait(cl.JobHandle(S.SUCCESS, 987654), 0) is S.INVALID_JOB_ID
    assert runner.wait("nonsense", 0) is S.INVALID_JOB_ID


@pytest.mark.parametrize("order", ["submission", "completion"])
def test_callbacks_run_once_each_in_order(tiny, make_runner, order: str) -> None:
    _, compiled = tiny
    runner = make_runner(compiled, max_concurrent_runs=4, callback_order=order)
    seen: list[int] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def callback(handle: cl.JobHandle) -> None:
        with lock:
            seen.append(handle.job_id)
            threads.add(threading.current_thread().name)

    slots = _slots(runner, 4)
    submitted = []
    for _ in range(10):
        for x, y in slots:
            handle = runner.execute_async([[x]], [[y]], callback=callback)
            assert handle.status is S.SUCCESS
            submitted.append(handle)
        for handle in submitted[-4:]:
            assert runner.wait(handle, 5000) is S.SUCCESS
    assert sorted(seen) == sorted(h.job_id for h in submitted)  # exactly once each
    if order == "submission":
        assert seen == [h.job_id for h in submitted]
    assert threading.current_thread().name not in threads  # on worker threads


def test_callback_exception_is_reported_by_wait_and_worker_survives(
    tiny, make_runner, caplog
) -> None:
    _, compiled = tiny
    runner = make_runner(compiled)
    x, y = tensors(runner, HW)

    def boom(handle: cl.JobHandle) -> None:
        raise RuntimeError("callback failed on purpose")

    handle = runner.execute_async([[x]], [[y]], callback=boom)
    assert runner.wait(handle, 5000) is S.FAILURE
    assert "callback failed on purpose" in caplog.text
    assert runner.get_property("callback_errors") == 1
    again = runner.execute_async([[x]], [[y]])
    assert runner.wait(again, 5000) is S.SUCCESS


def test_busy_output_is_refused_deterministically(make_runner) -> None:
    runner = make_runner(compile_to_memory(conv_net(size=256)), max_concurrent_runs=4)
    (x, y), (x2, _) = _slots(runner, 2)
    release = _hold_jobs(runner)
    first = runner.execute_async([[x]], [[y]])
    assert runner.execute_async([[x2]], [[y]]).status is S.INVALID_OUTPUT
    assert runner.execute([[x2]], [[y]]) is S.INVALID_OUTPUT
    assert runner.execute_async([[y]], [[x2]]).status in (S.INVALID_INPUT, S.INVALID_OUTPUT)
    # Inputs may be shared by concurrent jobs: they are only read.
    _, y3 = tensors(runner, HW)
    shared = runner.execute_async([[x]], [[y3]])
    assert shared.status is S.SUCCESS
    release.set()
    assert runner.wait(first, 5000) is S.SUCCESS
    assert runner.wait(shared, 5000) is S.SUCCESS


def test_close_with_jobs_in_flight(make_runner) -> None:
    before = set(threading.enumerate())
    runner = make_runner(
        compile_to_memory(conv_net(size=256)), max_concurrent_runs=8, async_threadpool_depth=2
    )
    reported: list[cl.JobHandle] = []
    slots = _slots(runner, 8)
    handles = [runner.execute_async([[x]], [[y]], callback=reported.append) for x, y in slots]
    assert all(h.status is S.SUCCESS for h in handles)
    start = time.monotonic()
    runner.close()
    assert time.monotonic() - start < 15
    for handle in handles:
        assert runner.wait(handle, 1000) in (S.SUCCESS, S.FAILURE)
    assert sorted(h.job_id for h in reported) == sorted(h.job_id for h in handles)
    leftover = [t for t in set(threading.enumerate()) - before if t.name.startswith("copyless")]
    assert leftover == []


def test_many_threads_share_one_runner(tiny, make_runner) -> None:
    model, compiled = tiny
    runner = make_runner(compiled, max_concurrent_runs=8)
    errors: list[str] = []
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    def worker(seed: int) -> None:
        x, y = tensors(runner, HW)
        rng = np.random.default_rng(seed)
        for i in range(20):
            data = rng.standard_normal(x.info.shape).astype(np.float32)
            x.numpy()[...] = data
            if i % 2:
                status = runner.execute([[x]], [[y]])
            else:
                handle = runner.execute_async([[x]], [[y]])
                status = runner.wait(handle, 10000) if handle.status is S.SUCCESS else handle.status
            if status is S.RESOURCE_UNAVAILABLE:
                continue
            (expected,) = session.run(None, {"input": data})
            if status is not S.SUCCESS or not np.allclose(y.numpy(), expected, atol=1e-4):
                errors.append(f"thread {seed} iteration {i}: {status}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


@pytest.mark.parametrize("order", ["submission", "completion"])
def test_a_finished_job_is_collectable_at_once(tiny, make_runner, order: str) -> None:
    """No head-of-line blocking in wait: job A is held (its callback blocks), job B
    submitted after it finishes and is collected at once. Only a callback waiting its turn
    in submission order (B with a callback) stays pending until A's callback returns."""
    _, compiled = tiny
    runner = make_runner(compiled, max_concurrent_runs=3, callback_order=order)
    (ax, ay), (bx, by), (cx, cy) = _slots(runner, 3)
    release, held = threading.Event(), threading.Event()

    def hold(_handle: cl.JobHandle) -> None:
        held.set()
        release.wait(30)

    a = runner.execute_async([[ax]], [[ay]], callback=hold)
    assert held.wait(30)
    try:
        b = runner.execute_async([[bx]], [[by]])  # no callback
        c = runner.execute_async([[cx]], [[cy]], callback=lambda h: None)
        start = time.perf_counter()
        assert runner.wait(b, 10_000) is S.SUCCESS
        assert time.perf_counter() - start < 5.0
        if order == "completion":
            assert runner.wait(c, 10_000) is S.SUCCESS
        else:
            assert runner.wait(c, 200) is S.JOB_PENDING  # its callback comes after A's
        assert runner.wait(a, 0) is S.JOB_PENDING
    finally:
        release.set()
    assert runner.wait(a, 10_000) is S.SUCCESS
    if order == "submission":
        assert runner.wait(c, 10_000) is S.SUCCESS


def test_native_openvino_jobs_never_block_the_submitter(tiny) -> None:
    """``native_async``: jobs run on OpenVINO's own async requests, started from a job
    worker (start_async does part of the run on the thread that calls it: 34.7 ms for a cold
    first submit, 171 ms for the second, measured). execute_async returns at once, the first
    calls included (no warm-up), and every answer equals the sync one."""
    model, compiled = tiny
    options = {"max_concurrent_runs": 2, "native_async": True}
    with cl.RunnerFactory.from_compiled(compiled, options, cl.RunnerType.OPENVINO) as runner:
        assert runner._execution._native  # the engine declared native async runs
        slots = _slots(runner, 4)
        rng = np.random.default_rng(3)
        submits, handles = [], []
        for x, y in slots:
            x.numpy()[...] = rng.standard_normal(x.info.shape)
            start = time.perf_counter()
            handle = runner.execute_async([[x]], [[y]])
            submits.append(time.perf_counter() - start)
            if handle.status is S.RESOURCE_UNAVAILABLE:
                assert runner.wait(handles[-2], 10_000) is S.SUCCESS
                handle = runner.execute_async([[x]], [[y]])
            assert handle.status is S.SUCCESS
            handles.append(handle)
        for handle in handles:
            assert runner.wait(handle, 10_000) in (S.SUCCESS, S.INVALID_JOB_ID)
        assert max(submits[:2]) < 0.02, submits
        for x, y in slots:
            (expected,) = reference(model, {"input": x.numpy().copy()})
            np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)


def _reshape_by_input_model():
    """y = sum(reshape(x [2,3], s)): static output, a run that fails when s does not hold 6."""
    import onnx
    import onnx.helper as oh
    import onnx.numpy_helper as onh

    f32, i64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    graph = oh.make_graph(
        [oh.make_node("Reshape", ["x", "s"], ["r"]),
         oh.make_node("ReduceSum", ["r"], ["t"], keepdims=0),
         oh.make_node("Reshape", ["t", "one"], ["y"])],
        "reshape_by_input",
        [oh.make_tensor_value_info("x", f32, [2, 3]), oh.make_tensor_value_info("s", i64, [2])],
        [oh.make_tensor_value_info("y", f32, [1])],
        initializer=[onh.from_array(np.array([1], np.int64), "one")],
    )  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return compile_to_memory(model)


def test_a_failed_native_openvino_run_ends_its_job() -> None:
    """OpenVINO calls no callback when an async run fails: the failure watch ends the job
    with RUNTIME_ERROR (it stayed JOB_PENDING for ever), and the runner goes on."""
    compiled = _reshape_by_input_model()
    options = {"native_async": True}
    with cl.RunnerFactory.from_compiled(compiled, options, cl.RunnerType.OPENVINO) as runner:
        infos = runner.get_tensors_info
        ins = [runner.allocate_npu_tensor(i) for i in infos(cl.TensorDirection.INPUT)]
        outs = [runner.allocate_npu_tensor(i) for i in infos(cl.TensorDirection.OUTPUT)]
        ins[0].numpy()[...] = np.arange(6, dtype=np.float32).reshape(2, 3)
        ended: list[cl.JobHandle] = []
        cases = (((3, 2), S.SUCCESS), ((5, 7), S.RUNTIME_ERROR), ((6, 1), S.SUCCESS))
        for shape, expected in cases:
            ins[1].numpy()[...] = shape
            job = runner.execute_async([ins], [outs], callback=ended.append)
            assert job.status is S.SUCCESS
            assert runner.wait(job, 10_000) is expected, shape
            if expected is S.SUCCESS:
                assert outs[0].numpy()[0] == 15.0
        assert [h.status for h in ended] == [S.SUCCESS, S.RUNTIME_ERROR, S.SUCCESS]
