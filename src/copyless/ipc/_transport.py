"""Tensors across processes: :func:`send_tensors` / :func:`recv_tensors`.

What travels is metadata (each tensor's info, memory type and byte offset) plus one file
descriptor per distinct buffer; tensor bytes never go through the socket. The receiver maps
the same pages, so a write on either side is seen by the other (no copy, ever).

Ownership on the receiving side: each received fd belongs to the tensor built over it
(``NpuTensor.from_fd(..., take_ownership=True)``) and is closed by :meth:`NpuTensor.close`
or, at the latest, by the tensor's ``weakref.finalize`` when it is collected; the mapping
goes with the last numpy view. Sub-tensors arrive as sub-tensors of a DMA_FD parent that
owns the fd, so the parent (and fd) live while any sub-tensor does.

What a receiver maps, the sender still holds. A received descriptor must be one whose size
no holder can change (a memfd sealed with ``F_SEAL_SHRINK | F_SEAL_GROW``, as
:meth:`HostMemory.shared` and the runner's XRT_BO tensors are, or a dma-buf), else the
sender could truncate it and kill the receiver with SIGBUS on its next read: other fds
(``/dev/shm`` files, unsealed memfds) are refused with one IpcError unless the receiver
trusts its peer (``allow_unsealed=True``; unsealed memfds stay refused). Only the bytes
each tensor's info covers are mapped.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

from ..memory import NpuTensor, size_is_fixed
from ..types import (
    CopylessError,
    MemoryType,
    MemoryTypeError,
    NpuTensorInfo,
    info_from_dict,
    info_to_dict,
)
from ._errors import IpcError
from ._wire import MAX_FDS, SOCKET_TIMEOUT, Timeout, close_fds, recv_message, send_message

_SHAREABLE = (MemoryType.XRT_BO, MemoryType.DMA_FD)
MAX_TENSORS = 4096
"""Most tensors one message may describe."""


def send_tensors(
    sock: socket.socket, tensors: Sequence[NpuTensor], *, timeout: Timeout = SOCKET_TIMEOUT
) -> None:
    """Send ``tensors`` over a connected ``AF_UNIX`` socket (no tensor bytes are copied).

    Only XRT_BO and DMA_FD tensors can travel: any other raises :class:`MemoryTypeError`
    before anything is sent. The sender keeps its tensors; the peer gets new descriptors.
    ``timeout``: seconds the peer has to take the message (default: the socket's timeout;
    at most ``MESSAGE_TIMEOUT``), else :class:`~copyless.ipc.IpcError`.
    """
    header, fds = encode_tensors(tensors)
    try:
        send_message(sock, header, fds, timeout=timeout)
    finally:
        close_fds(fds)


def recv_tensors(
    sock: socket.socket, *, timeout: Timeout = SOCKET_TIMEOUT, allow_unsealed: bool = False
) -> list[NpuTensor]:
    """Receive tensors sent by :func:`send_tensors`: DMA_FD tensors over the same memory.

    The returned tensors own the received descriptors (closed when they are collected).
    ``timeout``: seconds to wait for the message to begin (default: the socket's timeout,
    None: until it comes or the peer goes); a begun message must be whole within that and
    ``MESSAGE_TIMEOUT`` seconds. ``allow_unsealed``: also map descriptors whose size the
    sender can change (``/dev/shm`` files), for a peer you trust not to truncate them.
    Raises :class:`~copyless.ipc.IpcError` on a malformed, late or unsafe message (one
    error, whatever the bytes), :class:`~copyless.ipc.PeerClosedError` when the peer has
    gone, ``TimeoutError`` when no message began within ``timeout``.
    """
    header, fds = recv_message(sock, timeout=timeout)
    return decode_tensors(header, fds, allow_unsealed=allow_unsealed)


def encode_tensors(tensors: Sequence[NpuTensor]) -> tuple[dict[str, Any], list[int]]:
    """The header entries and NEW fds (caller closes them) that describe ``tensors``.

    Sub-tensors of one parent share one descriptor.
    """
    for tensor in tensors:
        if not isinstance(tensor, NpuTensor):
            raise TypeError(f"expected NpuTensor, got {type(tensor).__name__}")
        if tensor.memory_type not in _SHAREABLE:
            raise MemoryTypeError(
                f"tensor {tensor.info.name!r} is {tensor.memory_type.name}: only XRT_BO and "
                "DMA_FD tensors can be shared across processes"
            )
    fds: list[int] = []
    parents: dict[int, int] = {}
    entries: list[dict[str, Any]] = []
    try:
        for tensor in tensors:
            parent = tensor.parent
            key = id(parent) if parent is not None else None
            if key is not None and key in parents:
                index = parents[key]
            else:
                index = _export(tensor, fds)
                if key is not None:
                    parents[key] = index
            entries.append(
                {
                    "info": info_to_dict(tensor.info),
                    "memory_type": tensor.memory_type.name,
                    "fd": index,
                    "offset": tensor.offset,
                    "parent": None if parent is None else info_to_dict(parent.info),
                }
            )
    except BaseException:
        close_fds(fds)
        raise
    return {"kind": "tensors", "tensors": entries}, fds


def decode_tensors(
    header: dict[str, Any], fds: list[int], *, allow_unsealed: bool = False
) -> list[NpuTensor]:
    """Tensors over ``fds`` as described by ``header``; takes ownership of every fd.

    Each fd must have a fixed size (see the module docstring) unless ``allow_unsealed``.
    On any error all fds are closed and :class:`IpcError` is raised.
    """
    adopted: dict[int, NpuTensor] = {}
    try:
        entries = header.get("tensors")
        if header.get("kind") != "tensors" or not isinstance(entries, list):
            raise IpcError("message does not describe tensors")
        if len(entries) > MAX_TENSORS:
            raise IpcError(f"message describes {len(entries)} tensors; at most {MAX_TENSORS}")
        if not allow_unsealed:
            _check_fixed_size(fds)
        parents: dict[int, NpuTensor] = {}
        result = [_decode_one(entry, fds, parents, adopted) for entry in entries]
        if len(adopted) != len(fds):
            raise IpcError(f"{len(fds)} descriptors sent, {len(adopted)} used")
    except BaseException as exc:
        # Adopted fds are closed with their tensors (now, not at collection); the rest here.
        for tensor in adopted.values():
            tensor.close()
        close_fds([fd for fd in fds if fd not in adopted])
        if isinstance(exc, IpcError) or not isinstance(exc, Exception):
            raise
        raise IpcError(f"malformed tensor message: {exc}") from exc
    return result


def _check_fixed_size(fds: list[int]) -> None:
    for fd in fds:
        if not size_is_fixed(fd):
            raise IpcError(
                f"received descriptor {fd} is not sealed against resizing (a /dev/shm or "
                "other file, or a memfd without F_SEAL_SHRINK | F_SEAL_GROW): the sender "
                "could truncate it under the mapping (SIGBUS). Send sealed memory "
                "(HostMemory.shared, Runner.allocate_npu_tensor), or receive with "
                "allow_unsealed=True from a peer you trust"
            )


def _export(tensor: NpuTensor, fds: list[int]) -> int:
    fd = tensor.export_buffer()
    if fd < 0:
        raise MemoryTypeError(f"tensor {tensor.info.name!r}: its buffer cannot be exported")
    if len(fds) >= MAX_FDS:
        os.close(fd)
        raise IpcError(f"more than {MAX_FDS} distinct buffers in one message")
    fds.append(fd)
    return len(fds) - 1


def _decode_one(
    entry: Any,
    fds: list[int],
    parents: dict[int, NpuTensor],
    adopted: dict[int, NpuTensor],
) -> NpuTensor:
    if not isinstance(entry, dict):
        raise IpcError(f"tensor entry must be an object, got {type(entry).__name__}")
    index, offset = _index(entry.get("fd"), len(fds)), entry.get("offset", 0)
    if not _is_int(offset) or offset < 0:
        raise IpcError(f"tensor entry has a bad offset {offset!r}")
    info = info_from_dict(entry["info"])
    parent_info = entry.get("parent")
    if parent_info is None:
        if offset:
            raise IpcError(f"tensor {info.name!r}: offset {offset} without a parent")
        return _adopt(info, fds[index], adopted)
    parent = parents.get(index)
    if parent is None:
        parent = _adopt(info_from_dict(parent_info), fds[index], adopted)
        parents[index] = parent
    try:
        return parent._sub_tensor(info, offset)
    except CopylessError as exc:
        raise IpcError(f"sub-tensor {info.name!r} does not fit its parent: {exc}") from exc


def _adopt(info: NpuTensorInfo, fd: int, adopted: dict[int, NpuTensor]) -> NpuTensor:
    if fd in adopted:
        raise IpcError(f"tensor {info.name!r}: descriptor reused by two unrelated tensors")
    try:
        # The tensor becomes the fd's only owner: closed with it, or when it is collected.
        tensor = NpuTensor.from_fd(info, fd, take_ownership=True)
    except CopylessError as exc:
        raise IpcError(f"received tensor {info.name!r} cannot be mapped: {exc}") from exc
    adopted[fd] = tensor
    return tensor


def _index(value: Any, count: int) -> int:
    if not _is_int(value) or not 0 <= value < count:
        raise IpcError(f"tensor entry names descriptor {value!r} of {count}")
    return int(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
