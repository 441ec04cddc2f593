"""SlotPool with real producer processes: delivery, back-pressure, deaths, leaks."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time
from pathlib import Path

import ipc_helpers
import pytest
from ipc_helpers import FRAME, META, MemfdAllocator, check_frame

from copyless.ipc import SlotPool


def _fds() -> set[str]:
    return {fd for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")}


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


@pytest.fixture(autouse=True)
def _resource_tracker() -> None:
    # Spawning starts multiprocessing's process-wide resource tracker (one pipe fd, kept
    # for the life of the interpreter); start it before tests take fd snapshots.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_every_frame_arrives_intact_from_every_producer(context: str) -> None:
    with SlotPool(MemfdAllocator(), [FRAME, META], 3, prefetch=2, context=context) as pool:
        for _ in range(3):
            pool.start_producer(ipc_helpers.produce_frames, 40)
        seen = []
        for item in pool.filled(timeout=30):
            assert check_frame(item.tensors) == (item.producer, item.tag["frame"])
            seen.append((item.producer, item.tag["frame"]))
            pool.release(item.index)
        assert sorted(seen) == [(p, f) for p in range(3) for f in range(40)]
        assert pool.exit_codes() == {0: 0, 1: 0, 2: 0}
        assert pool.free_slots == 3


def test_producers_wait_for_free_slots() -> None:
    with SlotPool(MemfdAllocator(), [FRAME, META], 2) as pool:
        pool.start_producer(ipc_helpers.produce_frames, 10)
        pool.start_producer(ipc_helpers.produce_frames, 10)
        held = []
        deadline = time.monotonic() + 60  # producers are fresh processes: slow under load
        while len(held) < 2 and time.monotonic() < deadline:
            held += pool.poll(0.1)
        settle = time.monotonic() + 1.5
        while time.monotonic() < settle:
            held += pool.poll(0.1)  # never released: producers must stall
        assert len(held) == 2
        assert pool.running == 2
        for item in held:
            pool.release(item.index)
        count = 2 + sum(1 for item in pool.filled(timeout=30) if pool.release(item.index) is None)
        assert count == 20


def test_sigkilled_producer_is_reclaimed_and_the_others_go_on(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with SlotPool(MemfdAllocator(), [FRAME, META], 3, prefetch=2) as pool:
        doomed = pool.start_producer(ipc_helpers.produce_forever, str(pid_file))
        steady = pool.start_producer(ipc_helpers.produce_frames, 60, 0.01)
        counts = {doomed: 0, steady: 0}
        killed = False
        for item in pool.filled(timeout=30):
            check_frame(item.tensors)
            counts[item.producer] += 1
            if not killed and counts[doomed] >= 5:
                # Mid-stream: it holds granted slots (prefetch=2) and is writing.
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                killed = True
            pool.release(item.index)
        assert killed
        assert counts[steady] == 60
        assert pool.exit_codes()[doomed] == -signal.SIGKILL
        assert pool.exit_codes()[steady] == 0
        assert pool.free_slots == 3  # the dead producer's grants came back


def test_producers_stop_when_the_consumer_dies(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    consumer = multiprocessing.get_context("spawn").Process(
        target=ipc_helpers.consumer_with_producer, args=(str(pid_file),)
    )
    consumer.start()
    deadline = time.monotonic() + 20
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "producer never started"
        time.sleep(0.05)
    producer_pid = int(pid_file.read_text())
    time.sleep(0.2)
    consumer.kill()
    consumer.join(10)
    consumer.close()
    deadline = time.monotonic() + 10
    while not _gone(producer_pid):
        assert time.monotonic() < deadline, "orphaned producer kept running"
        time.sleep(0.05)


def test_no_fd_or_shm_leaks_after_shutdown(tmp_path: Path) -> None:
    shm_before = set(os.listdir("/dev/shm"))
    fds_before = _fds()
    pid_file = tmp_path / "pid"
    pool = SlotPool(MemfdAllocator(), [FRAME, META], 4)
    pool.start_producer(ipc_helpers.produce_frames, 20)
    pool.start_producer(ipc_helpers.produce_forever, str(pid_file))
    for got, item in enumerate(pool.filled(timeout=30), 1):
        pool.release(item.index)
        if got == 30:
            break  # stop with a producer still running: close() must reap it
    pool.close()
    del pool, item
    gc.collect()
    assert _gone(int(pid_file.read_text()))
    # none left open (fds other threads of this process close meanwhile are not ours; a
    # finalizer may still be closing one of ours: give it a moment)
    deadline = time.monotonic() + 5
    while _fds() - fds_before and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    leaked = {fd: os.path.realpath(f"/proc/self/fd/{fd}") for fd in _fds() - fds_before}
    assert not leaked, leaked
    # nothing of ours is left (other processes on the machine may add or remove their own)
    assert set(os.listdir("/dev/shm")) - shm_before == set()


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="num_slots"):
        SlotPool(MemfdAllocator(), [FRAME], 0)
    with pytest.raises(ValueError, match="start method"):
        SlotPool(MemfdAllocator(), [FRAME], 1, context="fork")
