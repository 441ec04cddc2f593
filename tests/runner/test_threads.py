"""Engine threads: every core for execute, cores / max_concurrent_runs for async jobs.

onnxruntime's intra-op threads belong to a session, so async jobs get sessions of their own,
loaded on the first execute_async; sync-only users never load them.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from runner_helpers import reference, tensors

import copyless as cl
from copyless.model import CompiledModel
from copyless.runner import _options as runner_options
from copyless.runner._options import parse_options

HW = cl.TensorType.HW
OK = cl.StatusCode.SUCCESS


@pytest.fixture
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_options, "_cores", lambda: 4)


@pytest.mark.usefixtures("four_cores")
def test_auto_threads_split_the_cores_between_concurrent_jobs() -> None:
    assert parse_options({}).engine_threads() == 4
    assert parse_options({}).async_engine_threads() == 2  # default max_concurrent_runs 2
    assert parse_options({"max_concurrent_runs": 4}).async_engine_threads() == 1
    assert parse_options({"max_concurrent_runs": 8}).async_engine_threads() == 1
    explicit = parse_options({"num_threads": 3, "max_concurrent_runs": 4})
    assert (explicit.engine_threads(), explicit.async_engine_threads()) == (3, 3)


#: onnxruntime forced: the async engines (and the engine spinning) are onnxruntime's.
ORT = cl.RunnerType.ONNXRUNTIME


@pytest.mark.usefixtures("four_cores")
def test_async_engines_load_on_first_execute_async_and_compute_the_same(
    tiny: tuple[onnx.ModelProto, CompiledModel],
) -> None:
    model, compiled = tiny
    with cl.RunnerFactory.from_compiled(compiled, None, ORT) as runner:
        assert runner.get_property("engine_threads") == 4
        assert runner.get_property("async_engine_threads") == 2
        x, y = tensors(runner, HW)
        data = np.random.default_rng(0).standard_normal(x.info.shape).astype(np.float32)
        x.numpy()[...] = data
        expected = reference(model, {"input": data})[0]
        assert runner.execute([[x]], [[y]]) is OK
        assert runner.get_property("engines_loaded") == 1  # sync only: nothing more
        y.numpy()[...] = 0
        jobs = [runner.execute_async([[x]], [[y]])]
        assert jobs[0].status is OK
        assert runner.wait(jobs[0], 10_000) is OK
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-5)
        assert runner.get_property("engines_loaded") == 2
        for _ in range(3):  # later jobs reuse them
            job = runner.execute_async([[x]], [[y]])
            assert runner.wait(job, 10_000) is OK
        assert runner.get_property("engines_loaded") == 2
        assert runner.execute([[x]], [[y]]) is OK  # sync still on the full-width engine
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("four_cores")
@pytest.mark.parametrize(
    ("options", "loaded", "async_threads"),
    [
        ({"async_engines": "shared"}, 1, 4),  # async jobs on the sync engine, every core
        ({"async_engines": "own", "num_threads": 2}, 2, 2),  # own set though threads match
        ({"async_engines": "auto", "num_threads": 2}, 1, 2),  # threads match: shared
        ({"async_engines": "auto"}, 2, 2),  # 4 cores / 2 runs: own set
    ],
)
def test_the_async_engine_split_is_an_explicit_option(
    tiny: tuple[onnx.ModelProto, CompiledModel], options: dict, loaded: int, async_threads: int
) -> None:
    """onnxruntime's split (its threads belong to a session). Pinned: the default runner
    measures the engines, and where OpenVINO wins, "auto" gives async jobs a throughput
    engine instead (test_openvino_async_jobs_get_throughput_streams)."""
    model, compiled = tiny
    with cl.RunnerFactory.from_compiled(compiled, options, ORT) as runner:
        assert runner.get_property("async_engines") == options["async_engines"]
        assert runner.get_property("async_engine_threads") == async_threads
        x, y = tensors(runner, HW)
        data = np.random.default_rng(2).standard_normal(x.info.shape).astype(np.float32)
        x.numpy()[...] = data
        job = runner.execute_async([[x]], [[y]])
        assert runner.wait(job, 10_000) is OK
        assert runner.get_property("engines_loaded") == loaded
        np.testing.assert_allclose(y.numpy(), reference(model, {"input": data})[0], 1e-4, 1e-5)
    with pytest.raises(cl.OptionError, match="async_engines"):
        parse_options({"async_engines": "both"})


@pytest.mark.usefixtures("four_cores")
def test_explicit_threads_and_openvino_share_one_engine(
    tiny: tuple[onnx.ModelProto, CompiledModel],
) -> None:
    """Async jobs share the sync engine where nothing better serves them: onnxruntime with
    explicit threads, OpenVINO compiled for throughput already (its streams serve concurrent
    requests), or with async_engines="shared"."""
    _, compiled = tiny
    cases = [
        ({"num_threads": 2}, cl.RunnerType.ONNXRUNTIME),
        ({"performance_hint": "THROUGHPUT"}, cl.RunnerType.OPENVINO),
        ({"async_engines": "shared"}, cl.RunnerType.OPENVINO),
        ({"max_concurrent_runs": 1}, cl.RunnerType.OPENVINO),
    ]
    for options, runner_type in cases:
        with cl.RunnerFactory.from_compiled(compiled, options, runner_type) as runner:
            x, y = tensors(runner, HW)
            job = runner.execute_async([[x]], [[y]])
            assert runner.wait(job, 10_000) is OK
            assert runner.get_property("engines_loaded") == 1, (options, runner_type)
            assert not runner.throughput_async


def test_openvino_async_jobs_get_throughput_streams(
    tiny: tuple[onnx.ModelProto, CompiledModel],
) -> None:
    """OpenVINO's default latency engine runs one request at a time on every core: with
    max_concurrent_runs > 1 the async jobs get an engine compiled for throughput (loaded on
    the first job), and their answers equal execute's."""
    model, compiled = tiny
    with cl.RunnerFactory.from_compiled(compiled, {}, cl.RunnerType.OPENVINO) as runner:
        assert runner.throughput_async
        x, y = tensors(runner, HW)
        x.numpy()[...] = np.random.default_rng(5).standard_normal(x.info.shape)
        job = runner.execute_async([[x]], [[y]])
        assert runner.wait(job, 10_000) is OK
        assert runner.get_property("engines_loaded") == 2
        hints = {e.compiled_model.get_property("PERFORMANCE_HINT") for e in runner._engines.loaded}
        assert {str(h).rsplit(".", 1)[-1] for h in hints} == {"LATENCY", "THROUGHPUT"}
        (expected,) = reference(model, {"input": x.numpy().copy()})
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)


def _entry(options: object, key: str) -> str:
    try:
        return str(options.get_session_config_entry(key))  # type: ignore[attr-defined]
    except RuntimeError:  # onnxruntime raises for a key never set
        return "0"


def _spinning(runner: cl.runner.Runner) -> set[tuple[str, str]]:
    """(allow_spinning, force_spinning_stop) of every onnxruntime session the runner loaded."""
    sessions = [engine._session for engine in runner._engines.loaded]  # type: ignore[attr-defined]
    keys = ("session.intra_op.allow_spinning", "session.force_spinning_stop")
    return {
        (_entry(s.get_session_options(), keys[0]), _entry(s.get_session_options(), keys[1]))
        for s in sessions
    }


def test_engine_spinning_is_opt_in_and_stops_with_each_run(
    tiny: tuple[onnx.ModelProto, CompiledModel],
) -> None:
    model, compiled = tiny
    for value, expected in ((None, ("0", "0")), (False, ("0", "0")), (True, ("1", "1"))):
        options = {} if value is None else {"engine_spinning": value}
        with cl.RunnerFactory.from_compiled(compiled, options, ORT) as runner:
            assert runner.get_property("engine_spinning") is (value is True)
            x, y = tensors(runner, HW)
            data = np.random.default_rng(1).standard_normal(x.info.shape).astype(np.float32)
            x.numpy()[...] = data
            assert runner.execute([[x]], [[y]]) is OK
            job = runner.execute_async([[x]], [[y]])  # async engines follow the option too
            assert runner.wait(job, 10_000) is OK
            np.testing.assert_allclose(
                y.numpy(), reference(model, {"input": data})[0], rtol=1e-4, atol=1e-5
            )
            assert _spinning(runner) == {expected}
    with pytest.raises(cl.OptionError, match="engine_spinning"):
        cl.RunnerFactory.from_compiled(compiled, {"engine_spinning": "yes"})


class _SlowToSayClosed(cl.NpuTensor):
    """A real tensor whose ``closed`` check lets other threads run (sleeps 0.2 ms first):
    it holds the plan-cache race window open instead of hoping for a thread switch there."""

    __slots__ = ()

    @property
    def closed(self) -> bool:
        time.sleep(0.0002)
        return bool(cl.NpuTensor.closed.fget(self))  # type: ignore[attr-defined]


def test_plan_cache_under_many_threads_never_raises(
    tiny: tuple[onnx.ModelProto, CompiledModel],
) -> None:
    """Regression: the runner's plan cache was read, evicted and cleared without its lock;
    two threads dropping the same stale plan raised KeyError out of ``execute``. Eight
    threads run rounds of: 80 private pairs each (more than the cache holds: it is cleared
    again and again), a shared pair (cached), then that pair closed (every thread finds the
    same stale plan)."""
    threads, rounds, private = 8, 30, 80
    cpu = cl.TensorType.CPU
    host = cl.MemoryType.USER_POINTER_NON_CMA
    _model, compiled = tiny
    with cl.RunnerFactory.from_compiled(compiled, {"input_tensor_type": "CPU"}) as runner:
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cpu)
        (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cpu)

        def pair(kind: type[cl.NpuTensor] = cl.NpuTensor) -> tuple[cl.NpuTensor, cl.NpuTensor]:
            return (kind(i, np.zeros(i.shape, np.float32), host),
                    kind(o, np.zeros(o.shape, np.float32), host))  # fmt: skip

        shared: list[tuple[cl.NpuTensor, cl.NpuTensor]] = []
        gate = threading.Barrier(threads, action=lambda: shared.append(pair(_SlowToSayClosed)))
        closed = threading.Barrier(threads, action=lambda: [t.close() for t in shared[-1]])
        errors: list[BaseException] = []
        statuses: list[cl.StatusCode] = []

        def worker() -> None:
            mine = [pair() for _ in range(private)]
            try:
                for _ in range(rounds):
                    gate.wait()
                    for a, b in mine:
                        statuses.append(runner.execute([[a]], [[b]]))
                    x, y = shared[-1]
                    first = runner.execute([[x]], [[y]])  # all threads write y: one at a time
                    if first is not cl.StatusCode.INVALID_OUTPUT:
                        statuses.append(first)
                    closed.wait()
                    stale = runner.execute([[x]], [[y]])
                    if stale is not cl.StatusCode.INVALID_INPUT:
                        statuses.append(stale)
            except BaseException as exc:  # noqa: BLE001 - the point of the test
                errors.append(exc)
                gate.abort()
                closed.abort()

        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(300)
    assert not errors, errors[:3]
    assert set(statuses) == {OK} and len(statuses) >= threads * rounds * private


def _job_threads() -> int:
    return sum(t.name.startswith("copyless-job") for t in threading.enumerate())


@pytest.mark.usefixtures("four_cores")
@pytest.mark.parametrize("how", ["method", "option"])
def test_warm_up_loads_engines_and_starts_workers_before_any_job(
    tiny: tuple[onnx.ModelProto, CompiledModel], how: str
) -> None:
    """After warm_up (or create_runner with warm_up=True) the first execute_async has
    nothing left to load or start: the async engines exist, the worker threads run, and
    the first jobs compute the right thing."""
    model, compiled = tiny
    before = _job_threads()
    options = {"max_concurrent_runs": 2, "warm_up": how == "option"}
    with cl.RunnerFactory.from_compiled(compiled, options, ORT) as runner:
        if how == "method":
            assert runner.get_property("engines_loaded") == 1
            runner.warm_up()
            runner.warm_up()  # idempotent: nothing more loaded
        assert runner.get_property("engines_loaded") == 2
        assert _job_threads() - before >= 3  # max_concurrent_runs + 1
        x, y = tensors(runner, HW)
        data = np.random.default_rng(1).standard_normal(x.info.shape).astype(np.float32)
        x.numpy()[...] = data
        job = runner.execute_async([[x]], [[y]])
        assert runner.get_property("engines_loaded") == 2
        assert runner.wait(job, 10_000) is OK
        np.testing.assert_allclose(y.numpy(), reference(model, {"input": data})[0],
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
        assert runner.get_property("jobs_run") == 1  # warm-up runs are not jobs
    with pytest.raises(cl.RunnerClosedError):
        runner.warm_up()


@pytest.mark.usefixtures("four_cores")
def test_the_first_execute_async_never_waits_for_engine_start_up(
    tiny: tuple[onnx.ModelProto, CompiledModel],
) -> None:
    """Without warm_up the async engines load on the first job's worker thread: a submit
    returns at once even while a load is held up (the first job just finishes later), and
    the job workers are already running when create_runner returns."""
    model, compiled = tiny
    before = _job_threads()
    with cl.RunnerFactory.from_compiled(compiled, {"max_concurrent_runs": 2}, ORT) as runner:
        assert _job_threads() - before >= 3  # started at creation, not on the first submit
        x, y = tensors(runner, HW)
        data = np.random.default_rng(2).standard_normal(x.info.shape).astype(np.float32)
        x.numpy()[...] = data
        loading = runner._engines._lock  # held: as if the async engines took long to load
        loading.acquire()
        try:
            started = time.perf_counter()
            job = runner.execute_async([[x]], [[y]])
            submitted = time.perf_counter() - started
            assert job.status is OK and submitted < 1.0  # before: blocked on the load
            assert runner.wait(job, 0) is cl.StatusCode.JOB_PENDING
            assert runner.get_property("engines_loaded") == 1
        finally:
            loading.release()
        assert runner.wait(job, 10_000) is OK
        assert runner.get_property("engines_loaded") == 2  # loaded by the job's worker
        np.testing.assert_allclose(y.numpy(), reference(model, {"input": data})[0],
                                   rtol=1e-4, atol=1e-5)  # fmt: skip


def test_a_failed_async_engine_load_ends_the_job_not_the_submit(
    tiny: tuple[onnx.ModelProto, CompiledModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    _model, compiled = tiny
    with cl.RunnerFactory.from_compiled(compiled, {"max_concurrent_runs": 2}, ORT) as runner:
        def refuse() -> list:
            raise MemoryError("no memory for the async engines")

        monkeypatch.setattr(runner._engines, "_async_loader", refuse)
        x, y = tensors(runner, HW)
        job = runner.execute_async([[x]], [[y]])
        assert job.status is OK
        assert runner.wait(job, 10_000) is cl.StatusCode.OUT_OF_MEMORY
