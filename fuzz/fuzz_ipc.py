"""Coverage-guided fuzzing of the ipc wire (``copyless.ipc``) with atheris: what a hostile peer
can send.

Modes (first byte of the input):

* ``STREAM``: the bytes go down a socketpair as they are, in up to three chunks, each
  carrying up to three descriptors from a fixed set (sealed memfds of 4 KiB and 64 KiB, an
  unsealed memfd, an unlinked ``/dev/shm`` file, a pipe, a socket, a read-only file), then
  the sender hangs up; ``recv_tensors`` reads messages until it fails
  (framing, JSON, descriptor counts, truncation).
* ``HEADER``: a well-framed message whose JSON header is built from the input (the
  ``tensors`` list with fuzzed infos: names, dtypes, layouts, shapes, strides, fd indices,
  offsets, parents; sometimes nesting up to 20,000 deep), sent with fuzzed
  descriptors (decoding, tensor construction, the seal and size checks).
* ``CONTROL``: the bytes fed to the slot pool's control-stream parsers (``parse_requests``
  in fuzzed chunks, ``parse_grants``).
* ``HELLO``: the bytes sent to a pool handshake's non-blocking reader (``Handshake.read``).

Contract: ``recv_tensors`` returns tensors or raises ``IpcError`` (``PeerClosedError``
included), nothing else, never a signal or a hang; every returned tensor's bytes can all be
read; after its tensors are closed no descriptor is left open (checked on every input);
the parsers return records or raise ``IpcError``; the handshake reader returns a hello,
None, or raises ``IpcError``.

Run::

    .venv/bin/python fuzz/fuzz_ipc.py -runs=20000 -seed=1      # uninstrumented C, as is
    .venv/bin/python fuzz/sanitize.py fuzz ipc -max_total_time=600   # clang, ASan
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import uuid
from typing import Any

import copyless.ipc._control as control
import copyless.ipc._handshake as handshake
import copyless.ipc._transport as transport
import copyless.ipc._wire as wire
import copyless.memory._host as host
import copyless.memory._seals as seals
import copyless.memory._span as span
import copyless.types._info as info_module
import copyless.types._serialize as serialize
from copyless import DataType, MemoryLayout, MemoryType
from copyless.ipc import IpcError, recv_tensors
from copyless.memory import HostMemory

STREAM, HEADER, CONTROL, HELLO = range(4)
NAMES = ["x", "", "\u00e9", "a" * 300]
DTYPES = [t.name for t in DataType] + ["FLOAT64", 7, None]
LAYOUTS = [m.name for m in MemoryLayout] + ["NCHW16"]
DIMS = [0, 1, 2, 3, 4, 7, 16, 1024, 4096, -1, -2, 1 << 40, 1 << 62, 1 << 64]
STRIDES = [None, [], [0], [-4], [4], [4, 4], [16, 4], [1, 1], [1 << 62, 4]]


def _fd_pool() -> list[int]:
    """Descriptors a peer might send (kept open for the process; the kernel dups them)."""
    sealed = [HostMemory.shared(n, warn_on_leak=False) for n in (4096, 65536)]
    fds = [os.dup(m.fd) for m in sealed]
    unsealed = os.memfd_create("fuzz-unsealed")
    os.ftruncate(unsealed, 65536)
    path = f"/dev/shm/copyless-fuzz-{uuid.uuid4().hex}"
    shm = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(path)
    os.ftruncate(shm, 65536)
    read, write = os.pipe()
    left, _right = socket.socketpair()
    readonly = os.open(sys.executable, os.O_RDONLY)
    return [*fds, unsealed, shm, read, write, left.detach(), readonly]


FDS = _fd_pool()
TARGETS = frozenset(os.readlink(f"/proc/self/fd/{fd}") for fd in FDS)


def _open_fds() -> int:
    """Descriptors open on one of the pool's files (received copies included): libraries'
    own background threads (onnxruntime's) open and close others at any time."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd, or one closed meanwhile
            count += os.readlink(f"/proc/self/fd/{name}") in TARGETS
    return count


def _send(sock: socket.socket, data: bytes, fds: list[int]) -> None:
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        sock.sendall(data[sent:])
    else:
        sock.sendall(data)


def _pick_fds(fdp: Any) -> list[int]:
    return [FDS[fdp.ConsumeIntInRange(0, len(FDS) - 1)] for _ in range(fdp.ConsumeIntInRange(0, 3))]


def _receive_all(sock: socket.socket, trusted: bool) -> None:
    """Read messages until the stream fails; check every tensor that arrives."""
    while True:
        try:
            tensors = recv_tensors(sock, timeout=2.0, allow_unsealed=trusted)
        except IpcError:
            return
        for tensor in tensors:
            if tensor.memory_type is not MemoryType.DMA_FD:
                raise AssertionError(f"received a {tensor.memory_type.name} tensor")
            view = tensor.bytes_view()
            if view.nbytes < tensor.info.size_in_bytes:
                raise AssertionError(f"{view.nbytes} bytes mapped for {tensor.info.describe()}")
            int(view.sum())  # every byte readable (a SIGBUS would end the run)
        for tensor in tensors:
            tensor.close()


def check_stream(fdp: Any) -> None:
    trusted = fdp.ConsumeBool()
    chunks = [(fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 256)), _pick_fds(fdp)) for _ in range(3)]
    chunks.append((fdp.ConsumeBytes(fdp.remaining_bytes()), []))
    a, b = socket.socketpair()
    with a, b:
        for data, fds in chunks:
            if data:
                _send(a, data, fds)
        a.shutdown(socket.SHUT_WR)
        _receive_all(b, trusted)


def _fuzzed_info(fdp: Any) -> Any:
    if fdp.ConsumeIntInRange(0, 9) == 0:
        return fdp.PickValueInList([None, 1, "x", [], {"name": "x"}])
    rank = fdp.ConsumeIntInRange(0, 4)
    info: dict[str, Any] = {
        "name": fdp.PickValueInList(NAMES),
        "data_type": fdp.PickValueInList(DTYPES),
        "direction": fdp.PickValueInList(["INPUT", "OUTPUT", "BOTH"]),
        "tensor_type": fdp.PickValueInList(["HW", "CPU", "GPU"]),
        "memory_layout": fdp.PickValueInList(LAYOUTS),
        "shape": [fdp.PickValueInList(DIMS) for _ in range(rank)],
    }
    strides = fdp.PickValueInList(STRIDES)
    if strides is not None:
        info["strides"] = strides if fdp.ConsumeBool() else [fdp.ConsumeIntInRange(-8, 64)
                                                             for _ in range(rank)]  # fmt: skip
    return info


def _fuzzed_header(fdp: Any, nfds: int) -> str:
    style = fdp.ConsumeIntInRange(0, 15)
    if style == 0:  # deep nesting, arrays or objects (within what one socket buffer holds)
        depth = fdp.ConsumeIntInRange(1, 20_000)
        if fdp.ConsumeBool():
            inner = "[" * depth + "]" * depth
        else:
            inner = '{"a":' * depth + "1" + "}" * depth
        return '{"kind":"tensors","nfds":%d,"tensors":%s}' % (nfds, inner)  # noqa: UP031
    if style == 1:  # raw text from the input
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 400))
    entries = []
    for _ in range(fdp.ConsumeIntInRange(0, 5)):
        entry: dict[str, Any] = {
            "info": _fuzzed_info(fdp),
            "memory_type": fdp.PickValueInList(["DMA_FD", "XRT_BO", "USER_POINTER_CMA", 3]),
            "fd": fdp.PickValueInList([0, 1, 2, 3, -1, True, "0", None, 1 << 70]),
            "offset": fdp.PickValueInList([0, 4, 8, 1024, 4096, -4, 3, 1 << 62, 1.5]),
        }
        if fdp.ConsumeBool():
            entry["parent"] = _fuzzed_info(fdp)
        entries.append(entry)
    header: dict[str, Any] = {"kind": fdp.PickValueInList(["tensors", "other"]), "tensors": entries}
    header["nfds"] = nfds if fdp.ConsumeIntInRange(0, 7) else fdp.ConsumeIntInRange(-1, 5)
    return json.dumps(header)


def check_header(fdp: Any) -> None:
    trusted = fdp.ConsumeBool()
    fds = _pick_fds(fdp)
    body = _fuzzed_header(fdp, len(fds)).encode("utf-8", "surrogatepass")
    data = wire.PREFIX.pack(wire.MAGIC, len(body)) + body
    a, b = socket.socketpair()
    with a, b:
        _send(a, data, fds)
        a.shutdown(socket.SHUT_WR)
        _receive_all(b, trusted)


def check_control(fdp: Any) -> None:
    buffer = bytearray()
    while fdp.remaining_bytes():
        buffer += fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 64))
        before = len(buffer)
        try:
            requests = control.parse_requests(buffer)
        except IpcError:
            return
        if len(buffer) > before or (requests and len(buffer) == before):
            raise AssertionError("parse_requests took records without consuming bytes")
    grants = bytearray(fdp.ConsumeBytes(64))
    control.parse_grants(grants)
    if len(grants) >= control.GRANT.size:
        raise AssertionError("parse_grants left a whole grant behind")


def check_hello(fdp: Any) -> None:
    a, b = socket.socketpair()
    shake = handshake.Handshake(b, 0, "token", 1.0)
    with a:
        try:
            for _ in range(4):
                data = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200))
                if data:
                    _send(a, data, _pick_fds(fdp) if fdp.ConsumeIntInRange(0, 7) == 0 else [])
                elif fdp.ConsumeBool():
                    a.shutdown(socket.SHUT_WR)
                if shake.read() is not None:
                    return
        except IpcError:
            return
        finally:
            shake.close()


CHECKS = {STREAM: check_stream, HEADER: check_header, CONTROL: check_control, HELLO: check_hello}


def check(data: bytes) -> None:
    import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]

    fdp = atheris.FuzzedDataProvider(data)
    before = _open_fds()
    CHECKS[fdp.ConsumeIntInRange(0, 3)](fdp)
    after = _open_fds()
    if after != before:
        raise AssertionError(f"{after - before} descriptor(s) leaked")


if __name__ == "__main__":
    from harness import main

    main(check, [wire, transport, control, handshake, seals, host, span, info_module, serialize])
