"""Pipeline.map_sources: many sources, fair, in order per source, batched across them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from pipeline_helpers import frames, logits

import copyless as cl
from copyless.model import CompiledModel


def _by_source(results: list[cl.Result]) -> dict[Any, list[int]]:
    out: dict[Any, list[int]] = {}
    for r in results:
        out.setdefault(r.source, []).append(r.index)
    return out


@pytest.mark.parametrize("batch", [1, 2, 4])
def test_order_within_each_source_and_right_answers(
    make_runner: Callable[..., cl.Runner],
    compiled: Callable[[int], CompiledModel],
    reference: Callable[..., Any],
    batch: int,
) -> None:
    xs = {name: frames(n, seed=i) for i, (name, n) in enumerate({"a": 9, "b": 14, "c": 3}.items())}

    def prepare(item: tuple[str, int], inputs: list[cl.NpuTensor]) -> None:
        name, k = item
        inputs[0].numpy()[...] = xs[name][k]

    runner = make_runner(compiled(4))
    sources = {name: [(name, k) for k in range(len(v))] for name, v in xs.items()}
    with cl.Pipeline(runner, prepare, logits, batch=batch, batch_wait_ms=2.0) as pipeline:
        results = list(pipeline.map_sources(sources))
    assert _by_source(results) == {name: list(range(len(v))) for name, v in xs.items()}
    for r in results:
        name, k = r.item
        assert (r.source, r.index) == (name, k)
        np.testing.assert_allclose(r.value, reference(xs[name][k]).reshape(-1), atol=1e-4)


def _paced(count: int, every_s: float) -> Iterator[int]:
    for k in range(count):
        time.sleep(every_s)
        yield k


def test_a_slow_source_does_not_hold_up_a_fast_one(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    """A 'camera' at 20 items/s beside a file: the file's 60 items come through while the
    camera has given only a few."""
    runner = make_runner(compiled(1))
    arrivals: list[tuple[str, float]] = []
    with cl.Pipeline(runner, lambda i, x: None, lambda i, y: i) as pipeline:
        start = time.perf_counter()
        for r in pipeline.map_sources({"camera": _paced(6, 0.05), "file": range(60)}):
            arrivals.append((r.source, time.perf_counter() - start))
    file_done = max(t for s, t in arrivals if s == "file")
    camera_done = max(t for s, t in arrivals if s == "camera")
    assert len(arrivals) == 66
    assert file_done < camera_done


def test_round_robin_batches_across_sources(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    """Four ready sources at batch 4: jobs take one item of each (the rows say so)."""
    runner = make_runner(compiled(4))
    jobs: list[list[str]] = []
    rows: dict[int, str] = {}

    def prepare(item: tuple[str, int], inputs: Any) -> None:
        rows[inputs.row] = item[0]
        if inputs.row == 0:
            jobs.append([])
        jobs[-1].append(item[0])

    sources = {s: [(s, k) for k in range(5)] for s in "abcd"}
    # wait for each source's reader to queue something before the first job is cut
    with cl.Pipeline(runner, prepare, lambda i, y: i, batch=4, slots=1,
                     batch_wait_ms=200.0) as pipeline:  # fmt: skip
        results = list(pipeline.map_sources(sources))
    assert len(results) == 20
    full = [job for job in jobs if len(job) == 4]
    assert full and all(sorted(job) == list("abcd") for job in full), jobs


def test_batch_wait_cuts_a_batch_when_items_are_slow(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    """One source at 25 items/s and batch 4: with a 5 ms wait, jobs go out short rather than
    waiting for four items (the latency a camera user cares about)."""
    runner = make_runner(compiled(4))
    sizes: list[int] = []

    def finish(item: int, outputs: Any) -> int:
        if outputs.row == 0:
            sizes.append(0)
        sizes[-1] += 1
        return item

    with cl.Pipeline(runner, lambda i, x: None, finish, batch=4, slots=1,
                     batch_wait_ms=5.0) as pipeline:  # fmt: skip
        values = [r.value for r in pipeline.map_sources({"cam": _paced(6, 0.04)})]
    assert values == list(range(6))
    assert max(sizes) < 4, sizes


def test_sources_must_be_a_mapping(
    make_runner: Callable[..., cl.Runner], compiled: Callable[[int], CompiledModel]
) -> None:
    runner = make_runner(compiled(1))
    with cl.Pipeline(runner, lambda i, x: None, lambda i, y: i) as pipeline:
        with pytest.raises(cl.OptionError, match="mapping"):
            pipeline.map_sources([range(3)])  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            pipeline.map_sources({"a": 3})  # type: ignore[dict-item]
