"""The stall watchdog: a wait with demands pending is interrupted with the demand and what
the cluster has; a wait with none is only reported; items and errors pass through; and on a
real head, a job whose actors hold every CPU fails in seconds instead of hanging."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("ray")

from copyless.ray import (
    StallError,
    stall_message,
    watch,
)
from copyless.ray._watchdog import ClusterState, Demand

STARVED = ClusterState((Demand({"CPU": 0.9}, 3),), {"CPU": 2.0}, {"CPU": 0.0}, 1)
BUSY = ClusterState((), {"CPU": 2.0}, {"CPU": 0.0}, 1)
#: Demands the free CPUs could take: waiting their turn (a slow start), not starved.
QUEUED = ClusterState((Demand({"CPU": 1.0}, 20),), {"CPU": 2.0}, {"CPU": 1.0}, 1)


def _slow(items: list[int], pause_s: float, after: int) -> Iterator[int]:
    for i, item in enumerate(items):
        if i == after:
            time.sleep(pause_s)
        yield item


def test_a_stall_with_pending_demands_is_interrupted_and_named() -> None:
    got: list[int] = []
    start = time.monotonic()
    with pytest.raises(StallError) as info:
        for item in watch(_slow([1, 2, 3], 60, after=2), stall_s=0.5, state=lambda: STARVED):
            got.append(item)
    assert got == [1, 2] and time.monotonic() - start < 10
    assert str(info.value) == (
        "no progress for 0.5 s: Ray cannot place 3 x {CPU: 0.9} (pending); the cluster has "
        "{CPU: 2} on 1 node(s), {CPU: 0} free. Run fewer actors or give the cluster more CPUs"
    )
    assert str(info.value) == stall_message(0.5, STARVED)


@pytest.mark.parametrize("state", [BUSY, QUEUED], ids=["nothing-pending", "demands-that-fit"])
def test_a_slow_batch_is_reported_not_failed(caplog, state) -> None:
    with caplog.at_level(logging.WARNING, logger="copyless.ray._watchdog"):
        got = list(watch(_slow([1, 2, 3], 2.0, after=1), stall_s=0.5, state=lambda: state))
    assert got == [1, 2, 3]
    assert any("nothing is starved" in r.message for r in caplog.records)


def test_items_and_errors_pass_through_and_the_handler_is_restored() -> None:
    import signal

    before = signal.getsignal(signal.SIGUSR1)

    def failing() -> Iterator[int]:
        yield 1
        raise RuntimeError("a task failed")

    assert list(watch(iter(range(5)), stall_s=10, state=lambda: STARVED)) == list(range(5))
    with pytest.raises(RuntimeError, match="a task failed"):
        list(watch(failing(), stall_s=10, state=lambda: STARVED))
    assert signal.getsignal(signal.SIGUSR1) is before
    assert not [t for t in threading.enumerate() if t.name == "copyless-ray-watchdog"]


def test_outside_the_main_thread_a_stall_is_logged(caplog) -> None:
    got: list[int] = []

    def consume() -> None:
        got.extend(watch(_slow([1, 2], 2.0, after=1), stall_s=0.5, state=lambda: STARVED))

    with caplog.at_level(logging.WARNING, logger="copyless.ray._watchdog"):
        worker = threading.Thread(target=consume)
        worker.start()
        worker.join(timeout=30)
    assert got == [1, 2]
    assert any("Ray cannot place 3 x {CPU: 0.9}" in r.message for r in caplog.records)
