"""A producer's handshake with the slot pool, read and written without blocking the pool.

From ``accept`` to its last slot message a connection is a :class:`Handshake`: the pool's
selector says when it can be read (the producer's ``hello``) or written (``welcome``, then
one tensors message per slot, with the slot's descriptors), and each step takes only what
the socket can do at once. A producer that stays silent, trickles its hello or never reads
its slots holds up nobody: it has until its deadline, then the pool drops it.

The checks that need no bytes come first (:func:`peer_credentials`): the connecting
process must run as the pool's user and be a producer the pool started (``SO_PEERCRED``),
so nothing is read from anyone else. The abstract socket the pool listens on has no file
permissions; these checks are its permissions.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import selectors
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..memory import NpuTensor
from ._errors import IpcError, PeerClosedError
from ._peers import Peer
from ._transport import encode_tensors
from ._wire import MAX_FDS, close_fds, frame, take_message

logger = logging.getLogger(__name__)

_PEERCRED = struct.Struct("3i")
_RECV_FLAGS = getattr(socket, "MSG_CMSG_CLOEXEC", 0) | socket.MSG_DONTWAIT
_HELLO_BYTES = 4096


def peer_credentials(conn: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end of ``conn`` (``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    pid, uid, _gid = _PEERCRED.unpack(creds)
    return pid, uid


def check_same_user(uid: int) -> None:
    if uid != os.getuid():
        raise IpcError(f"connection from user {uid}; only user {os.getuid()} may connect")


class Handshakes:
    """The pool's connections between ``accept`` and their last slot message, by producer
    id (at most one each), registered on the pool's selector as ``("hello", id)``."""

    def __init__(self, selector: selectors.BaseSelector, peers: Mapping[int, Peer]) -> None:
        self._selector = selector
        self._peers = peers
        self._pending: dict[int, Handshake] = {}

    def timeout(self, timeout: float | None) -> float | None:
        """``timeout``, shortened to wake for the earliest handshake deadline."""
        if not self._pending:
            return timeout
        left = max(0.0, min(h.deadline for h in self._pending.values()) - time.monotonic())
        return left if timeout is None else min(timeout, left)

    def accept(self, listener: socket.socket, token: str, timeout: float) -> None:
        """Take one connection; keep it only from a producer the pool started that has not
        connected yet, running as this user (nothing is read from anyone else)."""
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            logger.warning("accepting a producer connection failed: %s", exc)
            return
        try:
            pid, uid = peer_credentials(conn)
            check_same_user(uid)
            peer = next((p for p in self._peers.values() if p.pid == pid), None)
            if peer is None or peer.connected or peer.producer_id in self._pending:
                raise IpcError(f"connection from pid {pid}, not a producer waiting to connect")
        except (IpcError, OSError) as exc:
            logger.warning("refused a producer connection: %s", exc)
            conn.close()
            return
        shake = Handshake(conn, peer.producer_id, token, timeout)
        self._pending[peer.producer_id] = shake
        self._selector.register(conn, selectors.EVENT_READ, ("hello", peer.producer_id))

    def step(
        self, producer_id: int, welcome: Mapping[str, Any], slots: Sequence[Sequence[NpuTensor]]
    ) -> socket.socket | None:
        """Read the hello or send what the socket takes; the connection once it is done
        (then no longer on the selector), else None. A failure drops the connection."""
        shake = self._pending.get(producer_id)
        if shake is None:
            return None  # dropped earlier in the same batch of events
        try:
            if shake.hello is None:
                if shake.read() is None:
                    return None
                shake.welcome(welcome, slots)
                self._selector.modify(shake.sock, selectors.EVENT_WRITE, ("hello", producer_id))
            if not shake.flush():
                return None
        except (IpcError, OSError, ValueError) as exc:
            self.drop(producer_id, str(exc))
            return None
        del self._pending[producer_id]
        self._selector.unregister(shake.sock)
        return shake.sock

    def expire(self) -> None:
        """Drop every handshake past its deadline."""
        for shake in [h for h in self._pending.values() if h.expired]:
            self.drop(shake.producer_id, f"no complete handshake in {shake.timeout} s")

    def drop(self, producer_id: int, why: str) -> None:
        shake = self._pending.pop(producer_id, None)
        if shake is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(shake.sock)
        shake.close()
        logger.warning("refused producer %d's connection: %s", producer_id, why)

    def close(self) -> None:
        for shake in self._pending.values():
            shake.close()
        self._pending.clear()


class Handshake:
    """One connection from ``accept`` until every slot has been sent to it."""

    __slots__ = ("_messages", "_sending", "_token", "deadline", "hello", "inbox",
                 "producer_id", "sock", "timeout")  # fmt: skip

    def __init__(self, sock: socket.socket, producer_id: int, token: str, timeout: float) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.producer_id = producer_id
        self._token = token
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.inbox = bytearray()
        self.hello: dict[str, Any] | None = None
        self._messages: deque[Callable[[], tuple[bytes, list[int]]]] = deque()
        self._sending: tuple[memoryview, list[int]] | None = None

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def read(self) -> dict[str, Any] | None:
        """Take what has arrived; the hello once it is whole (None until then).

        IpcError for garbage, descriptors, an oversized hello or bytes after it;
        PeerClosedError for EOF.
        """
        try:
            data, fds, _flags, _ = socket.recv_fds(self.sock, _HELLO_BYTES, MAX_FDS, _RECV_FLAGS)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            raise IpcError(f"cannot be read ({exc})") from exc
        if fds:
            close_fds(fds)
            raise IpcError("sent descriptors in its hello")
        if not data:
            raise PeerClosedError(f"closed its connection after {len(self.inbox)} bytes")
        self.inbox += data
        hello = take_message(self.inbox)
        if hello is None:
            return None
        if self.inbox:
            raise IpcError("sent more than its hello before the welcome")
        if (
            hello.get("op") != "hello"
            or hello.get("token") != self._token
            or (hello.get("producer") != self.producer_id)
        ):
            raise IpcError("bad hello (wrong token or producer)")
        self.hello = hello
        return hello

    def welcome(self, header: Mapping[str, Any], slots: Sequence[Sequence[NpuTensor]]) -> None:
        """Queue the welcome and one message per slot (each encoded when its turn comes,
        so at most one slot's exported descriptors are open at a time)."""
        self._messages.append(functools.partial(_plain_message, header))
        for index, tensors in enumerate(slots):
            self._messages.append(functools.partial(_slot_message, index, tensors))

    def flush(self) -> bool:
        """Send what the socket takes now; True once everything queued has gone."""
        while True:
            if self._sending is None:
                if not self._messages:
                    return True
                message, new_fds = self._messages.popleft()()
                self._sending = (memoryview(message), new_fds)
            data, fds = self._sending
            try:
                if fds:  # descriptors ride on the first byte
                    sent = socket.send_fds(self.sock, [data], fds, socket.MSG_DONTWAIT)
                else:
                    sent = self.sock.send(data, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return False
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise PeerClosedError("closed its connection during the handshake") from exc
            except OSError as exc:
                raise IpcError(f"cannot be written ({exc})") from exc
            close_fds(fds)  # sent (the peer has its own copies) or none
            rest = data[sent:]
            self._sending = (rest, []) if len(rest) else None

    def close(self) -> None:
        """Close the socket and any descriptor not yet sent (idempotent)."""
        if self._sending is not None:
            close_fds(self._sending[1])
            self._sending = None
        self._messages.clear()
        self.sock.close()


def _plain_message(header: Mapping[str, Any]) -> tuple[bytes, list[int]]:
    return frame(header, 0), []


def _slot_message(index: int, tensors: Sequence[NpuTensor]) -> tuple[bytes, list[int]]:
    header, fds = encode_tensors(tensors)
    try:
        return frame({**header, "slot": index}, len(fds)), fds
    except BaseException:
        close_fds(fds)
        raise
