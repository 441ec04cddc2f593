"""send_tensors / recv_tensors: real child processes, real memfd buffers, no copies."""

from __future__ import annotations

import gc
import multiprocessing
import os
import socket
import time
from collections.abc import Iterator

import ipc_helpers
import numpy as np
import pytest

from copyless.ipc import IpcError, PeerClosedError, recv_tensors, send_tensors
from copyless.ipc._wire import MAGIC, MAX_HEADER_BYTES, PREFIX, recv_message, send_message
from copyless.memory import HostMemory, NpuTensor
from copyless.types import (
    DataType,
    MemoryLayout,
    MemoryType,
    MemoryTypeError,
    NpuTensorInfo,
    TensorDirection,
    TensorType,
)

SPAWN = multiprocessing.get_context("spawn")


def _info(name: str, shape: tuple[int, ...], dtype: DataType = DataType.UINT8) -> NpuTensorInfo:
    return NpuTensorInfo(
        name, dtype, TensorDirection.INPUT, TensorType.HW, MemoryLayout.GENERIC, shape
    )


def _fds() -> set[str]:
    # The directory listing's own fd is gone by the time we look at it: filter it out.
    return {fd for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")}


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    b.settimeout(10)
    yield a, b
    a.close()
    b.close()


def test_child_writes_are_seen_in_parent_numpy_view(
    listener: tuple[socket.socket, str],
) -> None:
    sock, address = listener
    alloc = ipc_helpers.MemfdAllocator()
    whole = alloc.allocate_npu_tensor(_info("whole", (4096,)))
    sub = whole._sub_tensor(_info("sub", (256,), DataType.INT32), 1024)
    other = alloc.allocate_npu_tensor(_info("other", (1, 640, 640, 3)))
    whole.numpy()[:] = 3
    sub.numpy()[:] = 77
    other.numpy()[:] = 9
    views = [whole.numpy(), sub.numpy(), other.numpy()]
    child = SPAWN.Process(target=ipc_helpers.child_write, args=(address, 200))
    child.start()
    conn, _ = sock.accept()
    with conn:
        conn.settimeout(30)
        send_tensors(conn, [whole, sub, other])
        report, fds = recv_message(conn)
        assert fds == []
        assert report["seen"] == [3, 77, 9]
        assert report["kinds"] == ["DMA_FD"] * 3
        assert report["offsets"] == [0, 1024, 0]
        # The child wrote after we sent: our existing views changed, nothing was copied back.
        assert np.all(views[1] == 200)
        assert np.all(views[2] == 200)
        assert np.all(views[0][:1024] == 200)
        assert np.all(views[0][1024:2048].view(np.int32) == 200)  # the sub-tensor's bytes
        assert np.all(views[0][2048:] == 200)
        send_message(conn, {"op": "go"})
    child.join(30)
    assert child.exitcode == 0
    child.close()


def test_received_tensors_own_their_fds_and_share_memory(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    alloc = ipc_helpers.MemfdAllocator()
    parent = alloc.allocate_npu_tensor(_info("p", (8192,)))
    subs = [parent._sub_tensor(_info(f"s{i}", (1024,)), i * 1024) for i in range(3)]
    gc.collect()  # an earlier test's garbage closing its fds mid-test is not ours
    before = _fds()
    send_tensors(a, [parent])
    assert _fds() == before  # the sender's exported dups are closed after sending
    alone = recv_tensors(b)
    per_buffer = len(_fds() - before)
    assert per_buffer >= 1
    send_tensors(a, subs)
    received = recv_tensors(b)
    # The three sub-tensors share one received buffer: no more fds than one tensor needs.
    assert len(_fds() - before) == 2 * per_buffer
    assert [t.offset for t in received] == [0, 1024, 2048]
    assert received[0].parent is received[1].parent is received[2].parent
    received[2].numpy()[:] = 5
    assert np.all(subs[2].numpy() == 5)
    assert alone[0].numpy()[2048] == 5
    del received, alone
    gc.collect()
    assert _fds() == before


@pytest.mark.parametrize(
    "memory_type", [MemoryType.USER_POINTER_NON_CMA, MemoryType.USER_POINTER_CMA]
)
def test_user_pointer_tensors_are_refused_before_sending(
    pair: tuple[socket.socket, socket.socket], memory_type: MemoryType
) -> None:
    a, b = pair
    shareable = ipc_helpers.MemfdAllocator().allocate_npu_tensor(_info("ok", (64,)))
    info = NpuTensorInfo(
        "user", DataType.UINT8, TensorDirection.INPUT, TensorType.CPU, MemoryLayout.NC, (1, 64)
    )
    buffer = HostMemory.locked(64, warn_on_leak=False)
    user = NpuTensor(info, buffer.array, memory_type)
    gc.collect()  # an earlier test's garbage closing its fds mid-test is not ours
    before = _fds()
    with pytest.raises(MemoryTypeError, match="USER_POINTER"):
        send_tensors(a, [shareable, user])
    assert _fds() == before
    b.setblocking(False)
    with pytest.raises(BlockingIOError):
        b.recv(1)  # nothing at all went out
    buffer.close()


def _raw(sock: socket.socket, body: bytes, fds: list[int] | None = None) -> None:
    data = PREFIX.pack(MAGIC, len(body)) + body
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", "not a copyless message"),
        (PREFIX.pack(MAGIC, MAX_HEADER_BYTES + 1), "exceeds"),
        (PREFIX.pack(MAGIC, 5) + b"\xff\xfe{}x", "not valid UTF-8 JSON"),
        (PREFIX.pack(MAGIC, 2) + b"[]", "must be a JSON object"),
        (PREFIX.pack(MAGIC, 11) + b'{"nfds": 3}', "announces 3 descriptors, 0 arrived"),
        (PREFIX.pack(MAGIC, 100) + b'{"kind":', "truncated message"),
        (MAGIC[:2], "truncated message"),
    ],
)
def test_garbage_on_the_socket_is_a_clean_error(
    pair: tuple[socket.socket, socket.socket], payload: bytes, message: str
) -> None:
    a, b = pair
    a.sendall(payload)
    a.shutdown(socket.SHUT_WR)  # a truncated message ends in EOF, not a hang
    with pytest.raises(IpcError, match=message):
        recv_tensors(b)


@pytest.mark.parametrize(
    "header",
    [
        b'{"kind":"tensors","nfds":1,"tensors":[{"info":{"name":"x"},"fd":0}]}',
        b'{"kind":"tensors","nfds":1,"tensors":[]}',
        b'{"kind":"tensors","nfds":1,"tensors":[{"fd":7}]}',
        b'{"kind":"other","nfds":1}',
    ],
)
def test_bad_tensor_messages_close_the_received_fds(
    pair: tuple[socket.socket, socket.socket], header: bytes
) -> None:
    a, b = pair
    memory = HostMemory.shared(4096, warn_on_leak=False)
    gc.collect()  # an earlier test's garbage closing its fds mid-test is not ours
    before = _fds()
    _raw(a, header, [memory.fd])
    with pytest.raises(IpcError):
        recv_tensors(b)
    assert _fds() == before
    memory.close()


def test_fds_announced_wrongly_are_closed(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    memory = HostMemory.shared(4096, warn_on_leak=False)
    gc.collect()  # an earlier test's garbage closing its fds mid-test is not ours
    before = _fds()
    _raw(a, b'{"kind":"tensors","nfds":0,"tensors":[]}', [memory.fd, memory.fd])
    with pytest.raises(IpcError, match="announces 0 descriptors, 2 arrived"):
        recv_message(b)
    assert _fds() == before
    memory.close()


def test_eof_between_messages_is_peer_closed(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.close()
    with pytest.raises(PeerClosedError):
        recv_tensors(b)


@pytest.mark.parametrize("target", [ipc_helpers.child_send_and_die, ipc_helpers.child_hang])
def test_a_dying_peer_never_hangs_the_reader(
    listener: tuple[socket.socket, str], target: object
) -> None:
    sock, address = listener
    child = SPAWN.Process(target=target, args=(address,))
    child.start()
    conn, _ = sock.accept()
    with conn:
        conn.settimeout(None)  # no timeout: only the peer's death can end the read
        if target is ipc_helpers.child_hang:
            time.sleep(0.2)
            child.kill()
        start = time.monotonic()
        with pytest.raises(IpcError):
            recv_tensors(conn)
        assert time.monotonic() - start < 10
    child.join(10)
    assert child.exitcode == -9
    child.close()
