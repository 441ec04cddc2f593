"""Framing of copyless IPC messages over connected ``AF_UNIX`` stream sockets.

A message is ``MAGIC (4 bytes) | header length (uint32 LE) | header (UTF-8 JSON object)``,
sent with one ``sendmsg`` that carries the message's file descriptors (``SCM_RIGHTS``).
The header says how many descriptors came with it (``"nfds"``), so a mismatch is caught.

Reading is exact (never past the end of the current message), so descriptors of the next
message are never taken early. Every failure is an :class:`~copyless.ipc.IpcError`; EOF
between messages is :class:`~copyless.ipc.PeerClosedError`; a header however deep, long or
malformed is one IpcError too. Descriptors received with a message that is then refused are
closed before the error is raised.

Deadlines, not per-call timeouts: a peer that trickles one byte at a time would renew a
per-``recv`` timeout forever. Here a message as a whole has a deadline. Waiting for a
message to *begin* is bounded by the caller's ``timeout`` (default: the socket's timeout;
None waits until a message comes or the peer goes, which the kernel reports as EOF), and
once its first byte is in, the rest must follow within that same deadline and at most
:data:`MESSAGE_TIMEOUT` seconds. Sending is bounded the same way (a peer that stops reading
fills the socket buffer). Waits use ``poll`` and non-blocking calls, so the socket's own
mode and timeout are left as they were.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import socket
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ._errors import IpcError, PeerClosedError

MAGIC = b"CLq1"
PREFIX = struct.Struct("<4sI")
MAX_HEADER_BYTES = 1 << 20
"""Largest header accepted: 1 MiB of JSON is far more than any tensor list needs."""
MAX_FDS = 253
"""Linux's ``SCM_MAX_FD``: descriptors one ``sendmsg`` can carry."""
MESSAGE_TIMEOUT = 10.0
"""Seconds a message may take once its first byte is in (or to be sent), at most."""


class _SocketTimeout:
    """The default ``timeout``: whatever the socket's own timeout is."""

    def __repr__(self) -> str:
        return "SOCKET_TIMEOUT"


SOCKET_TIMEOUT: Final = _SocketTimeout()
Timeout = float | None | _SocketTimeout

_RECV_FLAGS = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
_DONTWAIT = socket.MSG_DONTWAIT


def frame(header: Mapping[str, Any], nfds: int) -> bytes:
    """The bytes of one message whose header is ``header`` plus ``"nfds"``."""
    if nfds > MAX_FDS:
        raise IpcError(f"{nfds} file descriptors in one message; at most {MAX_FDS}")
    try:
        body = json.dumps({**header, "nfds": nfds}, separators=(",", ":")).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise IpcError(f"message header is not JSON-serialisable: {exc}") from exc
    if len(body) > MAX_HEADER_BYTES:
        raise IpcError(f"message header of {len(body)} bytes exceeds {MAX_HEADER_BYTES}")
    return PREFIX.pack(MAGIC, len(body)) + body


def take_message(buffer: bytearray) -> dict[str, Any] | None:
    """The header of the whole message at the front of ``buffer`` (removed from it), or None
    while it is incomplete. IpcError for garbage, however little of it has arrived."""
    if len(buffer) < PREFIX.size:
        if not MAGIC.startswith(bytes(buffer[: len(MAGIC)])):
            raise IpcError(f"not a copyless message (starts with {bytes(buffer)!r})")
        return None
    length = _check_prefix(bytes(buffer[: PREFIX.size]))
    if len(buffer) < PREFIX.size + length:
        return None
    header = _parse(bytes(buffer[PREFIX.size : PREFIX.size + length]))
    del buffer[: PREFIX.size + length]
    return header


def send_message(
    sock: socket.socket,
    header: Mapping[str, Any],
    fds: Sequence[int] = (),
    *,
    timeout: Timeout = SOCKET_TIMEOUT,
) -> None:
    """Send ``header`` (JSON-able) and ``fds``. The caller keeps its fds (the peer gets dups).

    The whole message must be handed to the kernel within ``timeout`` seconds (default:
    the socket's timeout) and at most :data:`MESSAGE_TIMEOUT`: IpcError when the peer does
    not read it by then.
    """
    data = memoryview(frame(header, len(fds)))
    deadline = _deadline(sock, timeout, cap=True)
    sent = 0
    while sent < len(data):
        _wait(sock, select.POLLOUT, deadline, f"sending ({sent} of {len(data)} bytes sent)")
        try:
            if sent == 0 and fds:  # descriptors ride on the first byte
                sent += socket.send_fds(sock, [data], list(fds), _DONTWAIT)
            else:
                sent += sock.send(data[sent:], _DONTWAIT)
        except (BlockingIOError, InterruptedError):
            continue
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise PeerClosedError("peer closed the connection") from exc
        except OSError as exc:
            raise IpcError(f"send failed: {exc}") from exc


def recv_message(
    sock: socket.socket, *, timeout: Timeout = SOCKET_TIMEOUT
) -> tuple[dict[str, Any], list[int]]:
    """Receive one message: ``(header, fds)``; the caller owns the returned fds.

    Raises :class:`PeerClosedError` on EOF before the first byte, :class:`IpcError` on
    garbage, a truncated, oversized or too deeply nested message, a descriptor count that
    does not match, or a message that does not complete by its deadline (see the module
    docstring), and the builtin ``TimeoutError`` when ``timeout`` passes before the first
    byte (nothing was consumed, so the caller may try again).
    """
    fds: list[int] = []
    reader = _MessageReader(sock, fds, _deadline(sock, timeout, cap=False))
    try:
        head = reader.exact(PREFIX.size)
        body = reader.exact(_check_prefix(head))
        header = _parse(body)
        if header.get("nfds") != len(fds):
            raise IpcError(
                f"message announces {header.get('nfds')!r} descriptors, {len(fds)} arrived"
            )
    except BaseException:
        close_fds(fds)
        raise
    return header, fds


def close_fds(fds: Sequence[int]) -> None:
    """Close every fd in ``fds``, ignoring ones already closed."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _check_prefix(head: bytes) -> int:
    magic, length = PREFIX.unpack(head)
    if magic != MAGIC:
        raise IpcError(f"not a copyless message (starts with {magic!r}); stream is garbage")
    if length > MAX_HEADER_BYTES:
        raise IpcError(f"message header of {length} bytes exceeds {MAX_HEADER_BYTES}")
    return int(length)


def _parse(body: bytes) -> dict[str, Any]:
    try:
        header = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise IpcError(f"message header is not valid UTF-8 JSON: {exc}") from exc
    except RecursionError as exc:
        raise IpcError("message header nests too deeply") from exc
    if not isinstance(header, dict):
        raise IpcError(f"message header must be a JSON object, got {type(header).__name__}")
    return header


def _deadline(sock: socket.socket, timeout: Timeout, *, cap: bool) -> float | None:
    """The monotonic time ``timeout`` ends (None: no end), capped at MESSAGE_TIMEOUT."""
    seconds = sock.gettimeout() if isinstance(timeout, _SocketTimeout) else timeout
    if cap:
        seconds = MESSAGE_TIMEOUT if seconds is None else min(seconds, MESSAGE_TIMEOUT)
    return None if seconds is None else time.monotonic() + max(0.0, seconds)


def _wait(sock: socket.socket, event: int, deadline: float | None, doing: str) -> None:
    """Block until ``sock`` is ready for ``event`` (or hung up); IpcError at the deadline."""
    if not _ready(sock, event, deadline):
        raise IpcError(f"timed out {doing}")


def _ready(sock: socket.socket, event: int, deadline: float | None) -> bool:
    """Whether ``sock`` became ready before ``deadline`` (looked at once even when it has
    passed: a non-blocking socket has a deadline of now)."""
    poller = select.poll()
    poller.register(sock.fileno(), event)
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if poller.poll(None if left is None else max(0, math.ceil(left * 1000))):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


class _MessageReader:
    """Exact reads of one message under its deadline, collecting the descriptors that ride
    on its bytes."""

    __slots__ = ("_begun", "_deadline", "_fds", "_sock")

    def __init__(self, sock: socket.socket, fds: list[int], deadline: float | None) -> None:
        self._sock, self._fds, self._deadline, self._begun = sock, fds, deadline, False

    def exact(self, size: int) -> bytes:
        chunks: list[bytes] = []
        got = 0
        while got < size:
            if not _ready(self._sock, select.POLLIN, self._deadline):
                if not self._begun:
                    raise TimeoutError("no message arrived in time")  # nothing consumed
                raise IpcError(f"timed out after {got} of {size} bytes (message deadline)")
            data = self._recv(size - got, got, size)
            if data is None:
                continue
            if not self._begun:
                self._begun = True
                end = time.monotonic() + MESSAGE_TIMEOUT
                self._deadline = end if self._deadline is None else min(self._deadline, end)
            chunks.append(data)
            got += len(data)
        return b"".join(chunks)

    def _recv(self, want: int, got: int, size: int) -> bytes | None:
        try:
            data, new_fds, flags, _ = socket.recv_fds(
                self._sock, want, MAX_FDS, _RECV_FLAGS | _DONTWAIT
            )
        except (BlockingIOError, InterruptedError):
            return None
        except ConnectionResetError as exc:
            if not self._begun:
                raise PeerClosedError("peer reset the connection") from exc
            raise IpcError(f"connection reset after {got} of {size} bytes") from exc
        except OSError as exc:
            raise IpcError(f"receive failed: {exc}") from exc
        self._fds.extend(new_fds)
        if flags & socket.MSG_CTRUNC:
            raise IpcError(f"control data truncated: more than {MAX_FDS} descriptors sent")
        if not data:
            if not self._begun:
                raise PeerClosedError("peer closed the connection")
            raise IpcError(f"truncated message: connection closed after {got} of {size} bytes")
        return data
