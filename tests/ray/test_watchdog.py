"""The stall watchdog: a wait with demands pending is cancelled with the demand and what
the cluster has (no thread signalled, from any thread); a wait with none, or with nothing
to cancel, is only reported; items and errors pass through; and on a real head, after the
other Ray-head tests in this process, a job whose actors hold every CPU fails in seconds
instead of hanging, and gives its CPUs back."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("ray")

from copyless.ray import (
    ClassificationJob,
    JobSettings,
    StallError,
    cluster_state,
    stall_message,
    watch,
)
from copyless.ray._watchdog import ClusterState, Demand

STARVED = ClusterState((Demand({"CPU": 0.9}, 3),), {"CPU": 2.0}, {"CPU": 0.0}, 1)
BUSY = ClusterState((), {"CPU": 2.0}, {"CPU": 0.0}, 1)
#: Demands the free CPUs could take: waiting their turn (a slow start), not starved.
QUEUED = ClusterState((Demand({"CPU": 1.0}, 20),), {"CPU": 2.0}, {"CPU": 1.0}, 1)


class _Slow:
    """``items`` with a pause of ``pause_s`` before item ``after``, which :meth:`cancel`
    cuts short with its error (as ``JobControl.fail`` cuts Ray Data's wait short)."""

    def __init__(self, items: list[int], pause_s: float, after: int) -> None:
        self.items, self.pause_s, self.after = items, pause_s, after
        self.cancelled = threading.Event()
        self.error: BaseException | None = None

    def __iter__(self) -> Iterator[int]:
        for i, item in enumerate(self.items):
            if i == self.after and self.cancelled.wait(self.pause_s):
                assert self.error is not None
                raise self.error
            yield item

    def cancel(self, error: BaseException) -> None:
        self.error = error
        self.cancelled.set()


def _slow(items: list[int], pause_s: float, after: int) -> Iterator[int]:
    for i, item in enumerate(items):
        if i == after:
            time.sleep(pause_s)
        yield item


@pytest.mark.parametrize("thread", ["main", "worker"])
def test_a_stall_with_pending_demands_is_cancelled_and_named(thread) -> None:
    got: list[int] = []
    slow = _Slow([1, 2, 3], 60, after=2)
    caught: list[BaseException] = []

    def consume() -> None:
        try:
            for item in watch(iter(slow), stall_s=0.5, state=lambda: STARVED,
                              cancel=slow.cancel):  # fmt: skip
                got.append(item)
        except StallError as exc:
            caught.append(exc)

    start = time.monotonic()
    if thread == "main":
        consume()
    else:
        worker = threading.Thread(target=consume)
        worker.start()
        worker.join(timeout=30)
    assert got == [1, 2] and time.monotonic() - start < 10
    assert slow.cancelled.is_set() and len(caught) == 1
    info = pytest.ExceptionInfo.from_exc_info((StallError, caught[0], None))
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


def test_items_and_errors_pass_through_and_no_signal_handler_is_set() -> None:
    import signal

    before = {sig: signal.getsignal(sig) for sig in signal.valid_signals()}

    def failing() -> Iterator[int]:
        yield 1
        raise RuntimeError("a task failed")

    assert list(watch(iter(range(5)), stall_s=10, state=lambda: STARVED)) == list(range(5))
    with pytest.raises(RuntimeError, match="a task failed"):
        list(watch(failing(), stall_s=10, state=lambda: STARVED))
    assert {sig: signal.getsignal(sig) for sig in signal.valid_signals()} == before
    assert not [t for t in threading.enumerate() if t.name == "copyless-ray-watchdog"]


def test_with_nothing_to_cancel_a_stall_is_logged(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="copyless.ray._watchdog"):
        got = list(watch(_slow([1, 2], 2.0, after=1), stall_s=0.5, state=lambda: STARVED))
    assert got == [1, 2]
    assert any("Ray cannot place 3 x {CPU: 0.9}" in r.message for r in caplog.records)


def test_actors_holding_every_cpu_fail_in_seconds_on_a_real_head(
    ray_driver, photo_folder, batch_model
) -> None:
    """Runs after the other Ray-head tests of the session (they sort last, this module
    after test_job's): the SIGUSR1 watchdog segfaulted the process here."""
    _, expected = photo_folder
    # Not planned: 2 actors of 1 CPU on the head's 2 CPUs leave the decode tasks nothing.
    settings = JobSettings(actors=2, batch_size=4, stall_s=5, decode="tasks")
    start = time.monotonic()
    with pytest.raises(StallError) as info:
        for _ in ClassificationJob(sorted(expected), batch_model, settings).run():
            pass
    assert time.monotonic() - start < 120
    message = str(info.value)
    assert message.startswith("no progress for 5 s: Ray cannot place ")
    assert "{CPU: 0.9} (pending); the cluster has {CPU: 2} on 1 node(s)" in message
    # The execution was cancelled: the actors gave their CPUs back.
    deadline = time.monotonic() + 60
    while cluster_state().free.get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cluster_state().free.get("CPU") == 2
