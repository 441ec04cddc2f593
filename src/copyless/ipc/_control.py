"""The per-frame control stream of a slot pool: small fixed binary records.

Once a producer has connected and mapped every slot (JSON messages, :mod:`._wire`), the
connection switches to this stream. Per frame only one record goes each way, so it is
packed with :mod:`struct` rather than JSON, and both sides read whatever has arrived in
one ``recv`` and parse every complete record in it: a busy consumer takes a whole burst of
``filled`` records, and sends a burst of grants, with one system call each.

Producer -> consumer, one record per request::

    op (u8) | tag kind (u8) | want (u16) | slot (u32) | tag length (u32) | tag bytes

``op`` is FILLED, RELEASE, WANT or DONE; ``want`` asks for that many more slots; the tag
is absent (kind NONE), a little-endian int64 (kind INT) or UTF-8 JSON (kind JSON).

Consumer -> producer: a grant is one little-endian u32 slot index. Nothing else travels
that way after the handshake; the consumer going away is EOF.

A record that cannot be parsed is an :class:`~copyless.ipc.IpcError`: the stream is out
of step and the connection must be dropped.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from ._errors import IpcError

FILLED, RELEASE, WANT, DONE = 1, 2, 3, 4
OPS = frozenset((FILLED, RELEASE, WANT, DONE))
NO_SLOT = 0xFFFF_FFFF
MAX_TAG_BYTES = 1 << 20
"""Largest JSON tag accepted (1 MiB): tags are labels, not payloads."""

RECORD = struct.Struct("<BBHII")
GRANT = struct.Struct("<I")
_INT64 = struct.Struct("<q")
_TAG_NONE, _TAG_INT, _TAG_JSON = 0, 1, 2
_INT64_RANGE = range(-(1 << 63), 1 << 63)


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed producer record (``slot`` is ``NO_SLOT`` for WANT and DONE)."""

    op: int
    slot: int
    want: int
    tag: Any


def encode_request(op: int, slot: int = NO_SLOT, want: int = 0, tag: Any = None) -> bytes:
    """One producer record. Raises :class:`IpcError` for a tag JSON cannot carry."""
    if tag is None:
        kind, body = _TAG_NONE, b""
    elif type(tag) is int and tag in _INT64_RANGE:
        kind, body = _TAG_INT, _INT64.pack(tag)
    else:
        kind = _TAG_JSON
        try:
            body = json.dumps(tag, separators=(",", ":")).encode()
        except (TypeError, ValueError, RecursionError) as exc:
            raise IpcError(f"tag is not JSON-serialisable: {exc}") from exc
        if len(body) > MAX_TAG_BYTES:
            raise IpcError(f"tag of {len(body)} bytes exceeds {MAX_TAG_BYTES}")
    return RECORD.pack(op, kind, want, slot, len(body)) + body


def parse_requests(buffer: bytearray) -> list[Request]:
    """Every complete record at the front of ``buffer``, which keeps what is left over.

    A broken record raises :class:`IpcError` when it is the first; after good ones, the
    parse stops before it (the good ones are returned, the next call raises), so records a
    peer sent before breaking the stream are never lost with it."""
    requests: list[Request] = []
    pos, end = 0, len(buffer)
    try:
        while end - pos >= RECORD.size:
            op, kind, want, slot, length = RECORD.unpack_from(buffer, pos)
            if op not in OPS or length > MAX_TAG_BYTES:
                raise IpcError(f"garbage on the control stream (op {op}, tag length {length})")
            if end - pos - RECORD.size < length:
                break  # the rest of this record has not arrived yet
            start = pos + RECORD.size
            requests.append(Request(op, slot, want, _decode_tag(kind, buffer, start, length)))
            pos = start + length
    except IpcError:
        if not requests:
            raise
    del buffer[:pos]
    return requests


def encode_grants(slots: list[int]) -> bytes:
    """Grant records for ``slots``, ready for one ``send``."""
    return struct.pack(f"<{len(slots)}I", *slots)


def parse_grants(buffer: bytearray) -> list[int]:
    """The slot indices of every complete grant in ``buffer`` (which keeps the rest)."""
    count = len(buffer) // GRANT.size
    slots = list(struct.unpack_from(f"<{count}I", buffer)) if count else []
    del buffer[: count * GRANT.size]
    return slots


def _decode_tag(kind: int, buffer: bytearray, start: int, length: int) -> Any:
    if kind == _TAG_NONE and length == 0:
        return None
    if kind == _TAG_INT and length == _INT64.size:
        return _INT64.unpack_from(buffer, start)[0]
    if kind == _TAG_JSON:
        try:
            return json.loads(bytes(buffer[start : start + length]).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise IpcError(f"tag is not valid UTF-8 JSON: {exc}") from exc
        except RecursionError as exc:
            raise IpcError("tag nests too deeply") from exc
    raise IpcError(f"bad tag (kind {kind}, {length} bytes)")
