"""The binary control stream of a slot pool: records, and producers that break it."""

from __future__ import annotations

import signal

import ipc_helpers
import pytest
from ipc_helpers import FRAME, META, MemfdAllocator, check_frame

from copyless.ipc import IpcError, SlotPool
from copyless.ipc._control import (
    DONE,
    FILLED,
    MAX_TAG_BYTES,
    NO_SLOT,
    RECORD,
    RELEASE,
    WANT,
    encode_grants,
    encode_request,
    parse_grants,
    parse_requests,
)


@pytest.mark.parametrize(
    "tag", [None, 0, -1, 2**63 - 1, 2**63, "frame.jpg", {"frame": 3, "path": "a"}, [1, 2.5], True]
)
def test_tags_come_back_as_sent(tag: object) -> None:
    buffer = bytearray(encode_request(FILLED, 5, 2, tag))
    (request,) = parse_requests(buffer)
    assert (request.op, request.slot, request.want, request.tag) == (FILLED, 5, 2, tag)
    assert type(request.tag) is type(tag)  # True stays a bool, not the int 1
    assert buffer == b""


def test_records_split_anywhere_are_parsed_once_whole() -> None:
    stream = b"".join(
        [
            encode_request(WANT, want=3),
            encode_request(FILLED, 1, 0, {"k": "v" * 100}),
            encode_request(RELEASE, 2),
            encode_request(DONE),
        ]
    )
    for cut in range(len(stream) + 1):
        buffer = bytearray(stream[:cut])
        first = parse_requests(buffer)
        buffer += stream[cut:]
        ops = [r.op for r in (*first, *parse_requests(buffer))]
        assert ops == [WANT, FILLED, RELEASE, DONE]
        assert buffer == b""
    (want,) = parse_requests(bytearray(encode_request(WANT, want=3)))
    assert want.slot == NO_SLOT


@pytest.mark.parametrize(
    "raw",
    [
        RECORD.pack(99, 0, 0, 0, 0),  # unknown op
        RECORD.pack(FILLED, 0, 0, 0, MAX_TAG_BYTES + 1),  # oversized tag
        RECORD.pack(FILLED, 7, 0, 0, 0),  # unknown tag kind
        RECORD.pack(FILLED, 1, 0, 0, 3) + b"abc",  # int tag of the wrong size
        RECORD.pack(FILLED, 2, 0, 0, 2) + b"\xff{",  # tag not UTF-8 JSON
        b"CLq1" + bytes(12),  # a JSON message where a record belongs
    ],
)
def test_garbage_records_are_ipc_errors(raw: bytes) -> None:
    with pytest.raises(IpcError):
        parse_requests(bytearray(raw))


def test_unserialisable_tags_are_refused_before_sending() -> None:
    with pytest.raises(IpcError, match="JSON"):
        encode_request(FILLED, 0, 0, object())
    with pytest.raises(IpcError, match="exceeds"):
        encode_request(FILLED, 0, 0, "x" * MAX_TAG_BYTES)


def test_grants_are_taken_whole() -> None:
    buffer = bytearray(encode_grants([3, 0, 7]) + b"\x01\x00")
    assert parse_grants(buffer) == [3, 0, 7]
    assert buffer == b"\x01\x00"
    buffer += b"\x00\x00"
    assert parse_grants(buffer) == [1]


@pytest.mark.parametrize(
    ("garbage", "die"),
    [
        (RECORD.pack(42, 0, 0, 0, 0), False),  # unknown op: disconnected while alive
        (RECORD.pack(FILLED, 0, 0, 1, 5), True),  # half a record, then SIGKILL
        (encode_request(FILLED, 2**31, 0, None), False),  # a slot it was never granted
    ],
    ids=["garbage", "half-record-then-death", "foreign-slot"],
)
def test_a_producer_breaking_the_stream_is_dropped_and_the_others_go_on(
    garbage: bytes, die: bool
) -> None:
    with SlotPool(MemfdAllocator(), [FRAME, META], 3, prefetch=2, io_timeout=5) as pool:
        bad = pool.start_producer(ipc_helpers.produce_then_garbage, 4, garbage, die)
        steady = pool.start_producer(ipc_helpers.produce_frames, 30, 0.002)
        counts = {bad: 0, steady: 0}
        for item in pool.filled(timeout=30):
            assert check_frame(item.tensors) == (item.producer, item.tag["frame"])
            counts[item.producer] += 1
            pool.release(item.index)
        assert counts == {bad: 4, steady: 30}
        assert pool.free_slots == 3  # the slot the bad producer held came back
        assert pool.exit_codes()[steady] == 0
        assert pool.exit_codes()[bad] == (-signal.SIGKILL if die else 1)
