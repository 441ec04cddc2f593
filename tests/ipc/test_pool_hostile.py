"""SlotPool against hostile producers (issue 44): handshakes that stall, trickle, nest or
never read; a WANT flood; a producer truncating its slots; connections from another user or
process. Each hostile peer is a child process; the pool's ``poll`` never blocks on one and
the well-behaved producer beside it delivers every frame."""

from __future__ import annotations

import logging
import os
import time
import uuid

import hostile_helpers
import ipc_helpers
import pytest
from ipc_helpers import FRAME, META, MemfdAllocator, check_frame

import copyless.ipc._pool as pool_module
from child_helpers import SPAWN, run_in_child
from copyless.ipc import SlotPool
from copyless.memory import NpuTensor
from copyless.types import MemoryType, NpuTensorInfo, TensorError

FRAMES = 20


@pytest.fixture(autouse=True)
def _resource_tracker() -> None:
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


def _serve(pool: SlotPool, frames: int, limit: float = 60.0) -> tuple[list[object], float]:
    """Poll in 50 ms steps until ``frames`` frames came: (frames, longest poll in s)."""
    seen: list[object] = []
    longest = 0.0
    deadline = time.monotonic() + limit
    while len(seen) < frames and time.monotonic() < deadline:
        start = time.monotonic()
        items = pool.poll(0.05)
        longest = max(longest, time.monotonic() - start)
        for item in items:
            seen.append(check_frame(item.tensors))
            pool.release(item.index)
    return seen, longest


@pytest.mark.parametrize("how", ["silent", "trickle", "nested", "garbage"])
def test_a_broken_handshake_never_blocks_the_pool(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """Before: a silent connection stalled the consumer 5 s, one byte every 2 s stalled it
    for ever, a nested-JSON hello ended the pipeline with RecursionError."""
    caplog.set_level(logging.WARNING, logger="copyless.ipc")
    with SlotPool(MemfdAllocator(), [FRAME, META], 4, io_timeout=1.5) as pool:
        monkeypatch.setattr(pool_module, "producer_main", hostile_helpers.hostile_producer)
        pool.start_producer(how)
        monkeypatch.undo()
        time.sleep(0.5)  # the hostile one connects first
        good = pool.start_producer(ipc_helpers.produce_frames, FRAMES)
        seen, longest = _serve(pool, FRAMES)
        assert sorted(f for p, f in seen if p == good) == list(range(FRAMES))
        assert longest < 0.5
        end = time.monotonic() + 5
        while time.monotonic() < end and "refused producer 0" not in caplog.text:
            pool.poll(0.05)
        pool.close(join_timeout=2.0)
    assert "refused producer 0's connection" in caplog.text


def test_a_want_flood_is_dropped_and_memory_stays_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: a producer flooding WANT grew the consumer's queue to 11.9 M entries in 4 s."""
    caplog.set_level(logging.WARNING, logger="copyless.ipc")
    with SlotPool(MemfdAllocator(), [FRAME, META], 3) as pool:
        flooder = pool.start_producer(hostile_helpers.flood_wants)
        good = pool.start_producer(ipc_helpers.produce_frames, FRAMES)
        longest_queue = 0
        seen: list[object] = []
        deadline = time.monotonic() + 60
        dropped = f"producer {flooder} broke the protocol"
        while (len(seen) < FRAMES or dropped not in caplog.text) and time.monotonic() < deadline:
            for item in pool.poll(0.05):
                seen.append(check_frame(item.tensors))
                pool.release(item.index)
            longest_queue = max(longest_queue, len(pool._waiting))
        assert sorted(f for p, f in seen if p == good) == list(range(FRAMES))
        assert longest_queue <= 2 * pool.num_slots
        assert not pool._state.peers[flooder].connected
    assert f"producer {flooder} broke the protocol (asks for 4 slots" in caplog.text


def test_a_producer_truncating_its_slots_cannot_kill_the_consumer() -> None:
    """Before: any producer could ftruncate a slot's memfd and kill the consumer (SIGBUS)."""
    outcome = run_in_child(hostile_helpers.consume_with_truncating_producer, 10, timeout=120)
    assert outcome.exitcode == 0, outcome
    assert outcome.value == ["EPERM"] * 10 + [{0: 0}]


def test_only_started_producers_of_this_user_may_connect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="copyless.ipc")
    with SlotPool(MemfdAllocator(), [FRAME, META], 2) as pool:
        address = pool._address
        stranger = SPAWN.Process(target=hostile_helpers.send_raw, args=(address, b"hello?"))
        stranger.start()
        others = []
        if os.getuid() == 0:  # another user (as root we can become one)
            others.append(SPAWN.Process(target=hostile_helpers.connect_as, args=(address, 65534)))
            others[0].start()
        good = pool.start_producer(ipc_helpers.produce_frames, FRAMES)
        seen, longest = _serve(pool, FRAMES)
        assert sorted(f for p, f in seen if p == good) == list(range(FRAMES))
        assert longest < 0.5
        end = time.monotonic() + 30
        while time.monotonic() < end and any(c.is_alive() for c in [stranger, *others]):
            pool.poll(0.05)  # they are refused when the pool accepts them, in its poll
        for child in [stranger, *others]:
            child.join(10)
            assert child.exitcode == 0
    assert "not a producer waiting to connect" in caplog.text
    if os.getuid() == 0:
        assert "connection from user 65534; only user 0 may connect" in caplog.text


def test_slots_a_producer_could_resize_are_refused() -> None:
    class ShmAllocator:
        def allocate_npu_tensor(self, info: NpuTensorInfo) -> NpuTensor:
            path = f"/dev/shm/copyless-pool-test-{uuid.uuid4().hex}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.unlink(path)
            os.ftruncate(fd, info.size_in_bytes)
            tensor = NpuTensor.from_fd(info, fd, take_ownership=True)
            assert tensor.memory_type is MemoryType.DMA_FD
            return tensor

    with pytest.raises(TensorError, match="'frame' is not sealed against resizing"):
        SlotPool(ShmAllocator(), [FRAME, META], 2)
