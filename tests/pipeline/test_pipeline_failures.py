"""Pipeline bad input: failing sources, prepare, finish and runner; endless sources; closing
while jobs run; bad arguments. One failed item is one error result; nothing hangs."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from pipeline_helpers import copy_in, frames, logits

import copyless as cl
from copyless.model import CompiledModel, compile_to_memory
from model_helpers import nonzero_net


def _pipeline_threads() -> list[str]:
    return [t.name for t in threading.enumerate()
            if t.name.startswith(("copyless-pipeline", "copyless-source"))]  # fmt: skip


def _failing_source(fail_at: int, count: int) -> Iterator[int]:
    for k in range(count):
        if k == fail_at:
            raise OSError(f"corrupt item {k}")
        yield k


def test_each_failure_is_one_error_result(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    xs = frames(12)
    prepare_in = copy_in(xs)

    def prepare(item: int, inputs: list[cl.NpuTensor]) -> Any:
        if item == 2:
            raise ValueError("prepare 2")
        if item == 3:
            return "not tensors"
        if item == 5:  # a tensor the runner refuses: its status comes back as a JobError
            wrong = cl.NpuTensorInfo("input", cl.DataType.FLOAT32, cl.TensorDirection.INPUT,
                                     cl.TensorType.HW, cl.MemoryLayout.NCHW,
                                     (1, 3, 8, 8))  # fmt: skip
            return [cl.NpuTensor(wrong, np.zeros((1, 3, 8, 8), np.float32),
                                 cl.MemoryType.USER_POINTER_CMA)]  # fmt: skip
        prepare_in(item, inputs)
        return None

    def finish(item: int, outputs: list[cl.NpuTensor]) -> Any:
        if item == 7:
            raise KeyError("finish 7")
        return logits(item, outputs)

    runner = make_runner(compiled(1))
    with cl.Pipeline(runner, prepare, finish) as pipeline:
        results = list(pipeline.map(range(12)))
    with cl.Pipeline(runner, lambda i, x: None, lambda i, y: i) as pipeline:
        sourced = list(pipeline.map(_failing_source(9, 12)))
    assert [r.index for r in results] == list(range(12))
    errors = {r.index: r.error for r in results if r.error is not None}
    assert set(errors) == {2, 3, 5, 7}
    assert isinstance(errors[2], ValueError)
    assert isinstance(errors[3], TypeError) and "expected None" in str(errors[3])
    assert isinstance(errors[5], cl.JobError)
    assert errors[5].status is cl.StatusCode.INVALID_INPUT
    assert isinstance(errors[7], KeyError)
    assert all(r.value is not None for r in results if r.ok)
    with pytest.raises(ValueError, match="prepare 2"):
        results[2].unwrap()
    # a source that raises: one error result (no item), and that source ends
    assert [r.index for r in sourced] == list(range(10))
    assert sourced[9].item is None and isinstance(sourced[9].error, OSError)
    assert all(r.ok for r in sourced[:9])
    assert [r.ok for r in pipeline_again(runner)] == [True] * 3  # the runner goes on


def pipeline_again(runner: cl.Runner) -> list[cl.Result]:
    with cl.Pipeline(runner, lambda i, x: None, lambda i, y: i) as pipeline:
        return list(pipeline.map(range(3)))


def test_a_failing_source_among_many(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    runner = make_runner(compiled(1))
    with cl.Pipeline(runner, lambda i, x: None, lambda i, y: i) as pipeline:
        results = list(pipeline.map_sources({"bad": _failing_source(2, 9), "good": range(9)}))
    by = {s: [(r.index, r.ok) for r in results if r.source == s] for s in ("bad", "good")}
    assert by["bad"] == [(0, True), (1, True), (2, False)]
    assert by["good"] == [(k, True) for k in range(9)]


@pytest.mark.parametrize("sources", [False, True])
def test_endless_source_left_after_300_items(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel], sources: bool
) -> None:
    """Items are pulled lazily: an endless generator is fine, and leaving the loop after 300
    items stops it with only a window's worth pulled beyond; every thread ends, no job is left
    and the runner goes on."""
    pulled = itertools.count()

    def endless() -> Iterator[int]:
        while True:
            yield next(pulled)

    runner = make_runner(compiled(1))
    pipeline = cl.Pipeline(runner, lambda i, x: None, lambda i, y: i, slots=3)
    for result in pipeline.map_sources({"s": endless()}) if sources else pipeline.map(endless()):
        if result.index == 299:
            break  # the iterator is dropped here: that closes the iteration
    assert next(pulled) <= 300 + 2 * 3 + 2 + 1  # the window and the reader's queue
    assert not _pipeline_threads()
    assert runner.get_property("jobs_in_flight") == 0
    assert pipeline.stats().done == 300
    assert [r.value for r in pipeline.map(range(4))] == [0, 1, 2, 3]  # usable again
    pipeline.close()
    assert pipeline_again(runner)[-1].value == 2


def test_an_exception_in_the_loop_closes_the_iteration(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    runner = make_runner(compiled(1))
    with cl.Pipeline(runner, lambda i, x: None, lambda i, y: i) as pipeline:
        with pytest.raises(KeyboardInterrupt):
            for result in pipeline.map(itertools.count()):
                if result.index == 10:
                    raise KeyboardInterrupt
        assert not _pipeline_threads()
        assert runner.get_property("jobs_in_flight") == 0


def test_close_while_jobs_run_returns_within_a_second(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    """close() from another thread while slow finishes hold every slot: it returns in about
    a second, the iteration ends, the threads end, the runner stays usable."""
    runner = make_runner(compiled(1))
    pipeline = cl.Pipeline(runner, lambda i, x: None, lambda i, y: time.sleep(0.3) or i, slots=3)
    got: list[int] = []

    def consume() -> None:
        got.extend(r.value for r in pipeline.map(itertools.count()))

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.5)
    start = time.perf_counter()
    pipeline.close()
    took = time.perf_counter() - start
    consumer.join(2.0)
    assert not consumer.is_alive()
    assert took < 1.5, took
    assert got == list(range(len(got)))
    time.sleep(0.5)  # a finish still sleeping when close returned ends by itself
    assert not _pipeline_threads()
    assert pipeline.closed
    with pytest.raises(cl.RunnerClosedError):
        pipeline.map(range(3))
    assert pipeline_again(runner)[-1].value == 2


def test_stop_delivers_what_was_taken(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    """stop() (what a SIGINT handler calls): no new items, but every item taken comes out,
    so the results are a prefix of the items with no hole."""
    runner = make_runner(compiled(1))
    with cl.Pipeline(runner, lambda i, x: time.sleep(0.005), lambda i, y: i) as pipeline:
        values = []
        for result in pipeline.map(itertools.count()):
            values.append(result.value)
            if result.index == 20:
                pipeline.stop()
        assert values == list(range(len(values))) and 21 <= len(values) <= 21 + 8
        assert pipeline.stats().in_flight == 0


def test_bad_arguments(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    runner = make_runner(compiled(2))
    ok = (lambda i, x: None, lambda i, y: i)
    for kwargs in ({"slots": 0}, {"slots": True}, {"batch": 3}, {"batch": 0},
                   {"batch_wait_ms": -1}, {"batch_wait_ms": float("nan")}):  # fmt: skip
        with pytest.raises(cl.OptionError):
            cl.Pipeline(runner, *ok, **kwargs)
    with pytest.raises(cl.OptionError, match="prepare"):
        cl.Pipeline(runner, None, ok[1])  # type: ignore[arg-type]
    with pytest.raises(cl.OptionError, match="runner"):
        cl.Pipeline("model.rai", *ok)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cl.Pipeline(runner, *ok).map(5)  # type: ignore[arg-type]
    runner.close()
    with pytest.raises(cl.RunnerClosedError):
        cl.Pipeline(runner, *ok)


def test_data_dependent_outputs(runner_type: cl.RunnerType) -> None:
    """NonZero's output: with no bound the pipeline cannot allocate it and says how to give
    one; with a capacity it is one tensor per job, read through produced_shape. The model's
    batch is 1 while its input's first dim is 3: the rows are the whole tensors."""
    net = nonzero_net()
    with cl.RunnerFactory.from_compiled(compile_to_memory(net), {}, runner_type) as runner:
        (nz,) = [i for i in runner.get_tensors_info(cl.TensorDirection.OUTPUT) if i.name == "nz"]
        if any(d < 0 for d in nz.shape):
            with pytest.raises(cl.UnsupportedError, match="--output-capacity"):
                cl.Pipeline(runner, lambda i, x: None, lambda i, y: i)
    bounded = compile_to_memory(net, output_capacity={"nz": (2, 12)})
    with cl.RunnerFactory.from_compiled(bounded, {}, runner_type) as runner:
        xs = [np.zeros((3, 4), np.float32) for _ in range(4)]
        for k, x in enumerate(xs):
            x[k % 3, k] = k + 1

        def prepare(item: int, inputs: list[cl.NpuTensor]) -> None:
            inputs[0].numpy()[...] = xs[item]

        def finish(item: int, outputs: list[cl.NpuTensor]) -> Any:
            (nz_out,) = [t for t in outputs if t.info.name == "nz"]
            return nz_out.produced().tolist()

        with cl.Pipeline(runner, prepare, finish) as pipeline:
            values = [r.unwrap() for r in pipeline.map(range(4))]
    assert values == [[[k % 3], [k]] for k in range(4)]


def test_capacity_beyond_the_runner(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    """More slots than the runner's max_concurrent_runs: the extra slots prepare ahead and
    wait for the runner's capacity (never a RESOURCE_UNAVAILABLE result)."""
    runner = make_runner(compiled(1), max_concurrent_runs=1)
    with cl.Pipeline(runner, lambda i, x: None, lambda i, y: i, slots=5) as pipeline:
        results = list(pipeline.map(range(40)))
    assert [r.value for r in results] == list(range(40))

