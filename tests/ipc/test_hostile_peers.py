"""send_tensors / recv_tensors against hostile peers (issue 44): a truncating sender, a slow
trickle, nested and oversized headers, a reader that never reads, a silent consumer. Each
peer or victim runs in a child process; every case ends in a clean error or the right
answer, never a signal or a hang."""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid

import hostile_helpers
import numpy as np
import pytest
from hostile_helpers import nested

import copyless.ipc._wire as wire
from child_helpers import SPAWN, ChildRun, run_in_child
from copyless.ipc import IpcError, recv_tensors, send_tensors
from copyless.ipc._wire import MAGIC, PREFIX, recv_message, send_message
from copyless.memory import HostMemory, NpuTensor
from copyless.types import (
    DataType,
    MemoryLayout,
    MemoryType,
    NpuTensorInfo,
    TensorDirection,
    TensorType,
    info_to_dict,
)

INFO = NpuTensorInfo(
    "x", DataType.FLOAT32, TensorDirection.INPUT, TensorType.HW, MemoryLayout.GENERIC, (4096,)
)


def _fd_of(kind: str) -> int:
    """A 16 KiB buffer of 1.0s: copyless's sealed memfd, an unsealed memfd, a /dev/shm file."""
    if kind == "sealed":
        memory = HostMemory.shared(INFO.size_in_bytes, warn_on_leak=False)
        fd = os.dup(memory.fd)
        memory.close()
    elif kind == "unsealed memfd":
        fd = os.memfd_create("unsealed", os.MFD_ALLOW_SEALING)
    else:
        path = f"/dev/shm/copyless-hostile-{uuid.uuid4().hex}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.unlink(path)
    os.ftruncate(fd, INFO.size_in_bytes) if kind != "sealed" else None
    os.pwrite(fd, np.ones(4096, np.float32).tobytes(), 0)
    return fd


def _entry() -> dict[str, object]:
    return {"info": info_to_dict(INFO), "memory_type": "DMA_FD", "fd": 0, "offset": 0,
            "parent": None}  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "trusted"),
    [("sealed", False), ("unsealed memfd", False), ("unsealed memfd", True),
     ("shm file", False), ("shm file", True)],
)  # fmt: skip
def test_a_truncating_sender(listener: tuple[socket.socket, str], kind: str, trusted: bool) -> None:
    """We are the hostile sender: we send a buffer, truncate it once the receiver (a child)
    has it, then tell it to read. Before: the receiver died of SIGBUS."""
    sock, address = listener
    fd = _fd_of(kind)
    run = ChildRun(hostile_helpers.receive_then_read, address, trusted)
    conn, _ = sock.accept()
    with conn:
        conn.settimeout(30)
        send_message(conn, {"kind": "tensors", "tensors": [_entry()]}, [fd])
        try:
            recv_message(conn)  # it has mapped the buffer
        except IpcError:
            pass  # it refused the message and hung up
        else:
            try:
                os.ftruncate(fd, 0)
                truncated = "yes"
            except OSError as exc:
                truncated = type(exc).__name__
            send_message(conn, {"op": "go", "truncated": truncated})
    os.close(fd)
    outcome = run.outcome()
    if kind == "sealed":  # the kernel refuses the truncation: the right sum
        assert outcome.exitcode == 0 and outcome.value == ("read", [4096.0, "PermissionError"])
    elif kind == "shm file" and trusted:  # what docs/api.md warns of: trust means trust
        assert outcome.exitcode == -signal.SIGBUS
    else:  # refused before anything is mapped
        assert outcome.exitcode == 0, outcome
        what, message = outcome.value
        assert what == "refused"
        assert "not sealed against resizing" in message or "memfd without" in message


def test_sent_runner_memory_is_sealed_and_mapped_to_its_info(
    listener: tuple[socket.socket, str],
) -> None:
    sock, address = listener
    memory = HostMemory.shared(1 << 20, warn_on_leak=False)  # more than the info covers
    tensor = NpuTensor._wrap_memory(INFO, memory, MemoryType.XRT_BO)
    tensor.numpy()[...] = 1.0
    run = ChildRun(hostile_helpers.receive_then_read, address, False)
    conn, _ = sock.accept()
    with conn:
        conn.settimeout(30)
        send_tensors(conn, [tensor])
        got, _ = recv_message(conn)
        assert got["nbytes"] == [INFO.size_in_bytes]  # only what the info covers is mapped
        fd = tensor.export_buffer()
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
        os.close(fd)
        send_message(conn, {"op": "go", "truncated": "no"})
    outcome = run.outcome()
    assert outcome.exitcode == 0 and outcome.value == ("read", [4096.0, "no"])


def test_refused_fds_are_closed_and_named() -> None:
    a, b = socket.socketpair()
    with a, b:
        fd = _fd_of("shm file")
        entry = {"info": info_to_dict(INFO), "memory_type": "DMA_FD", "fd": 0, "offset": 0,
                 "parent": None}  # fmt: skip
        send_message(a, {"kind": "tensors", "tensors": [entry]}, [fd])
        before = set(os.listdir("/proc/self/fd"))
        with pytest.raises(IpcError, match=r"not sealed against resizing.*allow_unsealed=True"):
            recv_tensors(b)
        assert set(os.listdir("/proc/self/fd")) <= before
        os.close(fd)


@pytest.mark.parametrize("socket_timeout", [1.0, None])
def test_a_trickled_message_ends_at_its_deadline(
    listener: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch,
    socket_timeout: float | None,
) -> None:  # fmt: skip
    """Before: with a 1 s timeout, 62 s for a message trickled one byte every 0.5 s."""
    sock, address = listener
    monkeypatch.setattr(wire, "MESSAGE_TIMEOUT", 1.5)  # a begun message's own limit
    body = b'{"kind":"tensors","nfds":0,"tensors":[]}'
    child = SPAWN.Process(
        target=hostile_helpers.send_raw, args=(address, PREFIX.pack(MAGIC, len(body)) + body, 0.3)
    )
    child.start()
    conn, _ = sock.accept()
    with conn:
        conn.settimeout(socket_timeout)
        start = time.monotonic()
        with pytest.raises(IpcError, match="timed out after"):
            recv_tensors(conn)
        assert time.monotonic() - start < 3.0
    child.join(30)
    assert child.exitcode == 0


def test_waiting_for_a_message_that_never_begins_is_a_retryable_timeout() -> None:
    a, b = socket.socketpair()
    with a, b:
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            recv_tensors(b, timeout=0.3)
        assert 0.25 < time.monotonic() - start < 2.0
        a.sendall(PREFIX.pack(MAGIC, 2) + b"{}")  # still in step: the next message reads
        with pytest.raises(IpcError, match="announces None descriptors"):
            recv_tensors(b, timeout=1.0)


@pytest.mark.parametrize(
    "header",
    [
        '{"kind":"tensors","tensors":%s}' % nested(2048),  # noqa: UP031
        '{"kind":"tensors","tensors":[{"info":%s}]}' % nested(2048, "object"),  # noqa: UP031
        nested(100_000),
        '{"kind":"tensors","tensors":[%s]}' % ",".join(["{}"] * 5000),  # noqa: UP031
        '{"kind":"tensors","tensors":[{"info":{"name":"x","data_type":"FLOAT32",'
        '"direction":"INPUT","tensor_type":"HW","memory_layout":"NC","shape":[1099511627776],'
        '"strides":[0]},"fd":0}]}',
        '{"kind":"tensors","tensors":[{"info":{"name":"x","data_type":"FLOAT32",'
        '"direction":"INPUT","tensor_type":"HW","memory_layout":"NC","shape":[%s]},"fd":0}]}'
        % ("9" * 5000),
    ],
    ids=["nested-arrays", "nested-objects", "deep-100k", "5000-tensors", "stride-0", "huge-int"],
)
def test_a_hostile_header_is_one_ipc_error(
    listener: tuple[socket.socket, str], header: str
) -> None:
    """Before: a 4 KB header of nested arrays raised RecursionError."""
    sock, address = listener
    body = header.encode()
    child = SPAWN.Process(
        target=hostile_helpers.send_raw, args=(address, PREFIX.pack(MAGIC, len(body)) + body)
    )
    child.start()
    conn, _ = sock.accept()
    with conn:
        conn.settimeout(30)
        with pytest.raises(IpcError):
            recv_tensors(conn)
    child.join(30)
    assert child.exitcode == 0


def test_a_reader_that_never_reads_ends_the_send_at_its_deadline() -> None:
    a, b = socket.socketpair()
    with a, b:
        start = time.monotonic()
        with pytest.raises(IpcError, match="timed out sending"):
            for _ in range(64):  # the socket buffer fills, then the deadline ends it
                send_message(a, {"pad": "x" * 500_000}, timeout=0.5)
        assert time.monotonic() - start < 5.0


def test_producer_connect_has_a_timeout(listener: tuple[socket.socket, str]) -> None:
    """Before: Producer.connect waited for ever on a consumer that never answers."""
    _sock, address = listener
    outcome = run_in_child(hostile_helpers.connect_producer, address, 0.5, timeout=30)
    assert outcome.exitcode == 0, outcome
    result, seconds = outcome.value
    assert result.startswith("IpcError: the pool did not take producer 0 in 0.5 s")
    assert seconds < 3.0


def test_a_non_blocking_socket_reads_what_has_arrived() -> None:
    a, b = socket.socketpair()
    with a, b:
        b.setblocking(False)  # a deadline of now: what is there is read, nothing waited for
        with pytest.raises(TimeoutError):
            recv_message(b)
        send_message(a, {"op": "x"})
        assert recv_message(b) == ({"op": "x", "nfds": 0}, [])
        a.setblocking(False)
        send_message(a, {"op": "y"})
        assert recv_message(b)[0]["op"] == "y"
