"""Hostile and buggy peers for the ipc tests, and the victims they are tried on (module-level
functions: spawned children import them)."""

from __future__ import annotations

import errno
import os
import resource
import socket
import time
from typing import Any

from ipc_helpers import FRAME, META, MemfdAllocator, check_frame, stamp

from copyless.ipc import IpcError, Producer, SlotPool, recv_tensors
from copyless.ipc._control import WANT, encode_request
from copyless.ipc._wire import MAGIC, PREFIX, frame, recv_message, send_message


def connect(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    return sock


def nested(depth: int, kind: str = "list") -> str:
    """JSON nested ``depth`` deep (4 KB of ``[[[...]]]`` at depth 2048)."""
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


# -- receivers (victims) ------------------------------------------------------------------
def receive_then_read(address: str, allow_unsealed: bool) -> tuple[str, Any]:
    """Receive tensors, ack, wait for the sender's go (it has tried to truncate them
    meanwhile), then read every byte. A truncated mapping would end this with SIGBUS."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with connect(address) as sock:
        sock.settimeout(30)
        try:
            tensors = recv_tensors(sock, allow_unsealed=allow_unsealed)
        except IpcError as exc:
            return "refused", str(exc)
        send_message(sock, {"op": "got", "nbytes": [t.nbytes for t in tensors]})
        go, _ = recv_message(sock)
        return "read", [float(t.numpy().sum()) for t in tensors] + [go["truncated"]]


def connect_producer(address: str, timeout: float) -> tuple[str, float]:
    """Producer.connect against a consumer that never answers: how it ended, how long."""
    start = time.monotonic()
    try:
        Producer.connect(address, "token", 0, timeout=timeout)
    except IpcError as exc:
        return f"IpcError: {exc}", time.monotonic() - start
    return "connected", time.monotonic() - start


def consume_with_truncating_producer(frames: int) -> list[Any]:
    """A consumer whose producer tries to truncate every slot it is granted."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    seen = []
    with SlotPool(MemfdAllocator(), [FRAME, META], 2) as pool:
        pool.start_producer(truncate_slots, frames)
        for item in pool.filled(timeout=30):
            check_frame(item.tensors)  # reads every byte: SIGBUS, were a slot truncated
            seen.append(item.tag["truncate"])
            pool.release(item.index)
        seen.append(pool.exit_codes())
    return seen


# -- hostile senders ----------------------------------------------------------------------
def send_raw(address: str, payload: bytes, delay: float = 0.0) -> None:
    """Send ``payload`` (at once, or one byte every ``delay`` s), then wait for EOF."""
    with connect(address) as sock:
        if delay:
            for i in range(len(payload)):
                try:
                    sock.send(payload[i : i + 1])
                except OSError:
                    return  # dropped: done
                time.sleep(delay)
        else:
            try:
                sock.sendall(payload)
            except OSError:
                return  # refused before it had all of it
        sock.settimeout(30)
        try:
            while sock.recv(4096):
                pass
        except OSError:
            return  # reset: dropped with our bytes unread


def connect_as(address: str, uid: int) -> str:
    """Connect from another user and send a well-formed hello: what came back."""
    os.setuid(uid)
    with connect(address) as sock:
        sock.settimeout(10)
        try:  # the pool may refuse (close) before the hello is sent: EPIPE, as refused
            sock.sendall(frame({"op": "hello", "token": "x", "producer": 0}, 0))
            return "answered" if sock.recv(4096) else "closed"
        except OSError as exc:
            return errno.errorcode.get(exc.errno or 0, str(exc))


# -- hostile producers ---------------------------------------------------------------------
def hostile_producer(
    address: str, token: str, producer_id: int, target: Any, args: tuple[Any, ...]
) -> None:
    """Stands in for ``producer_main`` (the tests patch it in): ``target`` names the way
    this producer breaks its handshake."""
    hello = frame({"op": "hello", "token": token, "producer": producer_id}, 0)
    if target == "silent":
        send_raw(address, b"")
    elif target == "trickle":
        send_raw(address, hello, delay=0.3)
    elif target == "nested":
        body = '{"op":"hello","token":"%s","producer":%d,"x":%s}' % (  # noqa: UP031
            token, producer_id, nested(3000))  # fmt: skip
        send_raw(address, PREFIX.pack(MAGIC, len(body)) + body.encode())
    elif target == "garbage":
        send_raw(address, b"GET / HTTP/1.1\r\n\r\n")


def truncate_slots(producer: Producer, frames: int) -> None:
    for frame_id in range(frames):
        slot = producer.acquire(timeout=10)
        fd = slot.tensors[0].export_buffer()
        try:
            os.ftruncate(fd, 0)
            result = "TRUNCATED"
        except OSError as exc:
            result = errno.errorcode[exc.errno or 0]
        finally:
            os.close(fd)
        slot.tensors[0].numpy()[...] = stamp(producer.producer_id, frame_id)
        slot.tensors[1].numpy()[0] = (producer.producer_id, frame_id)
        producer.submit(slot, tag={"truncate": result})


def flood_wants(producer: Producer) -> None:
    """Asks for one more slot, over and over, without end (until dropped)."""
    record = encode_request(WANT, want=1) * 4096
    sock = producer._sock
    assert sock is not None
    try:
        while True:
            sock.sendall(record)
    except OSError:
        return
