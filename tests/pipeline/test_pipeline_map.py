"""Pipeline.map: right answers, in order, at every batch, on both engines."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from pipeline_helpers import copy_in, frames, logits

import copyless as cl
from copyless.model import CompiledModel
from copyless.pipeline import STAGES


def _check(results: list[cl.Result], xs: list[np.ndarray], reference: Callable[..., Any]) -> None:
    assert [r.index for r in results] == list(range(len(xs)))
    for r in results:
        assert r.error is None, r
        assert r.source is None
        np.testing.assert_allclose(r.value, reference(xs[r.item]).reshape(-1), atol=1e-4)


@pytest.mark.parametrize(("model_batch", "batch"), [(1, 1), (4, 4), (4, 3), (3, 1)])
def test_every_item_right_and_in_order(
    make_runner: Callable[..., cl.Runner],
    compiled: Callable[[int], CompiledModel],
    reference: Callable[..., Any],
    model_batch: int,
    batch: int,
) -> None:
    xs = frames(41)
    runner = make_runner(compiled(model_batch))
    with cl.Pipeline(runner, copy_in(xs), logits, batch=batch, batch_wait_ms=1.0) as pipeline:
        results = list(pipeline.map(range(len(xs))))
    _check(results, xs, reference)


def test_order_kept_when_items_finish_out_of_order(
    make_runner: Callable[..., cl.Runner],
    compiled: Callable[[int], CompiledModel],
    reference: Callable[..., Any],
) -> None:
    """Random prepare delays make later items overtake earlier ones in the slots; the
    results still come back in the order of the items."""
    xs = frames(30, seed=3)
    delays = random.Random(0)
    prepare_in = copy_in(xs)

    def prepare(item: int, inputs: list[cl.NpuTensor]) -> None:
        time.sleep(delays.choice((0.0, 0.0, 0.004)))
        prepare_in(item, inputs)

    runner = make_runner(compiled(1), max_concurrent_runs=3)
    with cl.Pipeline(runner, prepare, logits, slots=4) as pipeline:
        results = list(pipeline.map(range(len(xs))))
    _check(results, xs, reference)


def test_prepare_may_return_its_own_tensors(
    make_runner: Callable[..., cl.Runner],
    compiled: Callable[[int], CompiledModel],
    reference: Callable[..., Any],
) -> None:
    """Batch 1: the item's tensors are bound in place (no copy); batch 4: copied into the
    item's row of the batch."""
    xs = frames(13, seed=5)
    for model_batch in (1, 4):
        runner = make_runner(compiled(model_batch))
        (info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        frame = cl.NpuTensorInfo(info.name, info.data_type, info.direction, info.tensor_type,
                                 info.memory_layout, (1, *info.shape[1:]))  # fmt: skip
        bound: list[int] = []

        def own(
            item: int,
            inputs: list[cl.NpuTensor],
            frame: cl.NpuTensorInfo = frame,
            bound: list[int] = bound,
        ) -> Any:
            tensor = cl.NpuTensor(frame, xs[item], cl.MemoryType.USER_POINTER_CMA)
            bound.append(tensor.get_virtual_address())
            return [tensor]

        with cl.Pipeline(runner, own, logits, batch=model_batch) as pipeline:
            results = list(pipeline.map(range(len(xs))))
        _check(results, xs, reference)
        assert sorted(bound) == sorted(x.ctypes.data for x in xs)


def test_rows_say_where_the_item_sits(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    runner = make_runner(compiled(4))
    seen: list[tuple[int, int, int]] = []

    def prepare(item: int, inputs: Any) -> None:
        seen.append((item, inputs.row, -1))

    def finish(item: int, outputs: Any) -> int:
        return int(outputs.row)

    with cl.Pipeline(runner, prepare, finish, batch=4, slots=1) as pipeline:
        rows = [r.value for r in pipeline.map(range(8))]
    assert rows == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [row for _, row, _ in seen] == rows


def test_timings_and_stats(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    xs = frames(20)
    runner = make_runner(compiled(1))
    real, real_async = runner.execute, runner.execute_async

    def slow(inputs: Any, outputs: Any) -> cl.StatusCode:  # a job of at least 5 ms
        time.sleep(0.005)
        return real(inputs, outputs)

    def slow_async(inputs: Any, outputs: Any) -> cl.JobHandle:  # (OpenVINO: streams)
        time.sleep(0.005)
        return real_async(inputs, outputs)

    runner.execute = slow  # type: ignore[method-assign]
    runner.execute_async = slow_async  # type: ignore[method-assign]

    def finish(item: int, outputs: list[cl.NpuTensor]) -> int:
        if item == 4:
            raise ValueError("item 4")
        return item

    with cl.Pipeline(runner, copy_in(xs), finish) as pipeline:
        results = list(pipeline.map(range(20)))
        stats = pipeline.stats()
    for r in results:
        assert tuple(r.timings) == STAGES
        assert all(v >= 0 for v in r.timings.values())
        assert r.timings["infer"] >= 0.005  # the job's own time, from its start
    assert (stats.done, stats.failed, stats.in_flight) == (19, 1, 0)
    assert stats.sources[None].pulled == 20
    assert stats.items_per_second > 0 and stats.elapsed > 0
    for stage in ("source", *STAGES):
        s = stats.stages[stage]
        assert s.count == 20 and 0 <= s.p50 <= s.p99, (stage, s)
    assert any("items/s" in line for line in stats.lines())


def test_prepare_overlaps_inference(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    """An I/O-bound prepare (a 20 ms sleep) of several items runs at once: 12 items take
    well under the 240 ms a plain loop spends sleeping alone."""
    runner = make_runner(compiled(1))

    def prepare(item: int, inputs: list[cl.NpuTensor]) -> None:
        time.sleep(0.02)

    with cl.Pipeline(runner, prepare, lambda item, outputs: item, slots=4) as pipeline:
        start = time.perf_counter()
        values = [r.unwrap() for r in pipeline.map(range(12))]
        took = time.perf_counter() - start
    assert values == list(range(12))
    assert took < 0.17, f"{took:.3f} s: prepare did not overlap"


def test_a_second_map_after_the_first(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    runner = make_runner(compiled(1))
    with cl.Pipeline(runner, lambda i, x: None, lambda i, y: i) as pipeline:
        assert [r.value for r in pipeline.map(range(5))] == list(range(5))
        assert [r.value for r in pipeline.map(range(3))] == list(range(3))
        first = pipeline.map(range(3))
        next(first)
        with pytest.raises(RuntimeError, match="already iterating"):
            next(pipeline.map(range(3)))
        first.close()
        assert [r.value for r in pipeline.map(range(2))] == [0, 1]
        assert pipeline.stats().done == 11


def test_on_openvino_native_async_requests(
    compiled: Callable[[int], CompiledModel], reference: Callable[..., Any]
) -> None:
    """A runner whose jobs run on OpenVINO's own async requests: the pipeline submits with
    execute_async (its slots beyond max_concurrent_runs wait for capacity) and the answers,
    in order, are the same."""
    xs = frames(30, seed=7)
    options = {"native_async": True, "max_concurrent_runs": 2}
    with cl.RunnerFactory.from_compiled(compiled(1), options, cl.RunnerType.OPENVINO) as runner:
        assert runner.native_async
        with cl.Pipeline(runner, copy_in(xs), logits, slots=4) as pipeline:
            results = list(pipeline.map(range(len(xs))))
    _check(results, xs, reference)
