"""Framing of copyless IPC messages over connected ``AF_UNIX`` stream sockets.

A message is ``MAGIC (4 bytes) | header length (uint32 LE) | header (UTF-8 JSON object)``,
sent with one ``sendmsg`` that carries the message's file descriptors (``SCM_RIGHTS``).
The header says how many descriptors came with it (``"nfds"``), so a mismatch is caught.

Reading is exact (never past the end of the current message), so descriptors of the next
message are never taken early. Every failure is an :class:`~copyless.ipc.IpcError`; EOF
between messages is :class:`~copyless.ipc.PeerClosedError`. A peer that dies is seen as
EOF by the kernel, so a reader never hangs on a dead peer; a peer that stalls mid-message
is bounded by the socket's timeout when one is set. Descriptors received with a message
that is then refused are closed before the error is raised.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from ._errors import IpcError, PeerClosedError

MAGIC = b"CLq1"
PREFIX = struct.Struct("<4sI")
MAX_HEADER_BYTES = 1 << 20
"""Largest header accepted: 1 MiB of JSON is far more than any tensor list needs."""
MAX_FDS = 253
"""Linux's ``SCM_MAX_FD``: descriptors one ``sendmsg`` can carry."""

_RECV_FLAGS = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


def send_message(sock: socket.socket, header: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    """Send ``header`` (JSON-able) and ``fds``. The caller keeps its fds (the peer gets dups)."""
    if len(fds) > MAX_FDS:
        raise IpcError(f"{len(fds)} file descriptors in one message; at most {MAX_FDS}")
    try:
        body = json.dumps({**header, "nfds": len(fds)}, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise IpcError(f"message header is not JSON-serialisable: {exc}") from exc
    if len(body) > MAX_HEADER_BYTES:
        raise IpcError(f"message header of {len(body)} bytes exceeds {MAX_HEADER_BYTES}")
    data = PREFIX.pack(MAGIC, len(body)) + body
    try:
        sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
        if sent < len(data):
            # Descriptors ride on the first byte; the rest may follow in plain sends.
            sock.sendall(data[sent:])
    except BrokenPipeError as exc:
        raise PeerClosedError("peer closed the connection") from exc
    except OSError as exc:
        raise IpcError(f"send failed: {exc}") from exc


def recv_message(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """Receive one message: ``(header, fds)``; the caller owns the returned fds.

    Raises :class:`PeerClosedError` on EOF before the first byte, :class:`IpcError` on
    garbage, a truncated or oversized message, or a descriptor count that does not match,
    and the builtin ``TimeoutError`` when the socket's timeout passes before the first byte
    (nothing was consumed, so the caller may try again).
    """
    fds: list[int] = []
    try:
        magic, length = PREFIX.unpack(_recv_exact(sock, PREFIX.size, fds, at_boundary=True))
        if magic != MAGIC:
            raise IpcError(f"not a copyless message (starts with {magic!r}); stream is garbage")
        if length > MAX_HEADER_BYTES:
            raise IpcError(f"message header of {length} bytes exceeds {MAX_HEADER_BYTES}")
        body = _recv_exact(sock, length, fds, at_boundary=False)
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


def _parse(body: bytes) -> dict[str, Any]:
    try:
        header = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise IpcError(f"message header is not valid UTF-8 JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise IpcError(f"message header must be a JSON object, got {type(header).__name__}")
    return header


def _recv_exact(sock: socket.socket, size: int, fds: list[int], *, at_boundary: bool) -> bytes:
    """Exactly ``size`` bytes, collecting any descriptors that ride on them into ``fds``."""
    chunks: list[bytes] = []
    got = 0
    while got < size:
        try:
            data, new_fds, flags, _ = socket.recv_fds(sock, size - got, MAX_FDS, _RECV_FLAGS)
        except TimeoutError as exc:
            if at_boundary and got == 0:
                raise  # nothing consumed: the stream is still in step, the caller may retry
            raise IpcError(f"timed out after {got} of {size} bytes") from exc
        except ConnectionResetError as exc:
            if at_boundary and got == 0:
                raise PeerClosedError("peer reset the connection") from exc
            raise IpcError(f"connection reset after {got} of {size} bytes") from exc
        except OSError as exc:
            raise IpcError(f"receive failed: {exc}") from exc
        fds.extend(new_fds)
        if flags & socket.MSG_CTRUNC:
            raise IpcError(f"control data truncated: more than {MAX_FDS} descriptors sent")
        if not data:
            if at_boundary and got == 0:
                raise PeerClosedError("peer closed the connection")
            raise IpcError(f"truncated message: connection closed after {got} of {size} bytes")
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)
