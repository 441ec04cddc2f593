"""The consumer side of a slot pool: shared input slots, producers, back-pressure.

See the package docstring for the whole picture and an example.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import secrets
import selectors
import socket
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..memory import NpuTensor, size_is_fixed
from ..types import MemoryType, NpuTensorInfo, TensorError
from ._control import DONE, FILLED, RELEASE, Request, encode_grants, parse_requests
from ._errors import IpcError
from ._handshake import Handshakes
from ._peers import Peer
from ._producer import ProducerTarget, producer_main

logger = logging.getLogger(__name__)

_FREE = -1
_CONSUMER = -2
_RECV_BYTES = 1 << 16


class SlotAllocator(Protocol):
    """What the pool needs from a runner: fd-backed (XRT_BO) input tensors."""

    def allocate_npu_tensor(self, info: NpuTensorInfo) -> NpuTensor: ...


@dataclass(frozen=True, slots=True)
class FilledSlot:
    """A slot a producer has written: give it back with :meth:`SlotPool.release`."""

    index: int
    producer: int
    tag: Any
    tensors: tuple[NpuTensor, ...]


class _State:
    """Everything the pool must close; kept apart from the pool so its finalizer can."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.waker, self.wakee = socket.socketpair()
        self.peers: dict[int, Peer] = {}
        self.handshakes = Handshakes(self.selector, self.peers)

    def close(self, join_timeout: float) -> None:
        self.handshakes.close()
        for peer in self.peers.values():
            peer.close_connection()  # producers see EOF and stop
        for peer in self.peers.values():
            peer.reap(join_timeout)
        self.peers.clear()
        self.selector.close()
        for sock in (self.listener, self.waker, self.wakee):
            sock.close()


class SlotPool:
    """``num_slots`` sets of input tensors (one per info), shared with producer processes.

    Slots are allocated once with ``allocator.allocate_npu_tensor`` (a runner) and mapped
    once by each producer; afterwards only slot indices travel. A slot is FREE, GRANTED to
    a producer, or with the CONSUMER (filled, until :meth:`release`). Producers wait for
    grants, so at most ``num_slots`` frames are in the pipeline (back-pressure). A producer
    that exits or dies (socket EOF or process sentinel) has its granted slots reclaimed;
    the others go on.

    Processes use the ``"spawn"`` (default) or ``"forkserver"`` start method: the consumer
    usually runs threads (the runner's workers), which ``fork`` would copy half-locked.
    The pool is driven from one thread; only :meth:`wake` may be called from others.

    Hostile or broken producers cost the consumer nothing: only processes this pool started,
    running as its user, may connect (``SO_PEERCRED``); a handshake is read and written
    without blocking :meth:`poll` and must be done within ``io_timeout`` seconds; a producer
    may ask for at most ``num_slots`` slots it has not been granted (beyond that, or any
    malformed record, it is dropped); and every slot must be memory no producer can resize
    (sealed memfds, as the runner allocates), so none can truncate one under the consumer.
    """

    def __init__(
        self,
        allocator: SlotAllocator,
        infos: Sequence[NpuTensorInfo],
        num_slots: int,
        *,
        prefetch: int = 1,
        context: str = "spawn",
        io_timeout: float = 5.0,
    ) -> None:
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise TensorError(f"num_slots must be an int >= 1, got {num_slots!r}")
        if not infos:
            raise TensorError("a slot needs at least one tensor info")
        if context not in ("spawn", "forkserver"):
            raise TensorError(f"start method must be 'spawn' or 'forkserver', got {context!r}")
        slots = tuple(
            tuple(allocator.allocate_npu_tensor(info) for info in infos) for _ in range(num_slots)
        )
        for tensor in slots[0]:
            _check_slot_tensor(tensor)
        self._slots = slots
        self._ctx = (
            multiprocessing.get_context("spawn")
            if context == "spawn"
            else multiprocessing.get_context("forkserver")
        )
        self._owner = [_FREE] * num_slots
        self._free: deque[int] = deque(range(num_slots))
        self._waiting: deque[int] = deque()
        self._filled: list[FilledSlot] = []
        self._prefetch = min(max(1, prefetch), num_slots)
        self._io_timeout = io_timeout
        self._token = secrets.token_hex(16)
        self._address = f"\0copyless-pool-{self._token[:20]}"
        self._next_id = 0
        state = self._state = _State()
        self._finalizer = weakref.finalize(self, state.close, 1.0)
        state.listener.bind(self._address)
        state.listener.listen(64)
        state.listener.setblocking(False)
        state.waker.setblocking(False)
        state.wakee.setblocking(False)
        state.selector.register(state.listener, selectors.EVENT_READ, ("accept", -1))
        state.selector.register(state.wakee, selectors.EVENT_READ, ("wake", -1))

    # -- accessors ----------------------------------------------------------------------
    @property
    def slots(self) -> tuple[tuple[NpuTensor, ...], ...]:
        """The consumer's view of every slot (runner-allocated tensors)."""
        return self._slots

    @property
    def num_slots(self) -> int:
        return len(self._slots)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def running(self) -> int:
        """Producers not yet finished (connected, or process alive)."""
        return sum(peer.running for peer in self._state.peers.values())

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def exit_codes(self) -> dict[int, int | None]:
        """Exit code of every reaped producer (negative: killed by that signal)."""
        return {pid: p.exitcode for pid, p in self._state.peers.items() if p.exited}

    # -- producers ----------------------------------------------------------------------
    def start_producer(self, target: ProducerTarget, *args: Any) -> int:
        """Start ``target(producer, *args)`` in a new process; returns its producer id.

        ``target`` and ``args`` must be picklable (a module-level function). The process
        connects back on its own; :meth:`poll` accepts it and shares the slots.
        """
        self._check_open()
        producer_id = self._next_id
        self._next_id += 1
        process = self._ctx.Process(
            target=producer_main,
            args=(self._address, self._token, producer_id, target, tuple(args)),
            name=f"copyless-producer-{producer_id}",
            daemon=True,
        )
        process.start()
        peer = Peer(producer_id, process)
        self._state.peers[producer_id] = peer
        self._state.selector.register(peer.sentinel, selectors.EVENT_READ, ("exit", producer_id))
        return producer_id

    # -- the event loop -----------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> list[FilledSlot]:
        """Serve producers for up to ``timeout`` seconds (None: until something happens).

        Returns the slots filled meanwhile (maybe none: a wake-up, a grant, an exit).
        Slots released since the last call are granted first, one send per producer.
        """
        self._check_open()
        self._grant()
        handshakes = self._state.handshakes
        for key, _ in self._state.selector.select(handshakes.timeout(timeout)):
            kind, producer_id = key.data
            if kind == "accept":
                handshakes.accept(self._state.listener, self._token, self._io_timeout)
            elif kind == "hello":
                self._shake(producer_id)
            elif kind == "wake":
                with contextlib.suppress(BlockingIOError):
                    self._state.wakee.recv(4096)
            elif kind == "msg":
                self._serve(producer_id)
            elif kind == "exit":
                self._on_exit(producer_id)
        handshakes.expire()
        self._grant()
        filled, self._filled = self._filled, []
        return filled

    def filled(self, timeout: float | None = None) -> Iterator[FilledSlot]:
        """Filled slots until every producer has finished (release each one when done)."""
        while True:
            items = self.poll(timeout)
            yield from items
            if not items and self.running == 0:
                return

    def release(self, index: int) -> None:
        """Return a consumed slot to the free list.

        Waiting producers get it at the next :meth:`poll` (or :meth:`filled` step), which
        sends the grants of every slot released meanwhile together.
        """
        if not 0 <= index < len(self._owner) or self._owner[index] != _CONSUMER:
            raise TensorError(f"slot {index!r} is not held by the consumer")
        self._owner[index] = _FREE
        self._free.append(index)

    def wake(self) -> None:
        """Make a blocked :meth:`poll` return (thread-safe; e.g. from a job callback)."""
        with contextlib.suppress(BlockingIOError, OSError):
            self._state.waker.send(b"\0")

    def close(self, join_timeout: float = 5.0) -> None:
        """Disconnect and reap every producer, close sockets, drop the slots (idempotent)."""
        if self._finalizer.detach() is not None:
            self._state.close(join_timeout)
        self._slots = ()

    def __enter__(self) -> SlotPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise IpcError("the slot pool is closed")

    def _shake(self, producer_id: int) -> None:
        welcome = {"op": "welcome", "num_slots": len(self._slots), "prefetch": self._prefetch}
        conn = self._state.handshakes.step(producer_id, welcome, self._slots)
        if conn is None:
            return
        peer = self._state.peers[producer_id]
        # Control records are read as they come (never blocking the loop on a producer
        # that stalls mid-record) and grants never fill the buffer (<= num_slots pending).
        peer.sock = conn
        self._state.selector.register(conn, selectors.EVENT_READ, ("msg", producer_id))
        logger.debug("producer %d (pid %d) connected", producer_id, peer.pid)

    def _serve(self, producer_id: int) -> bool:
        """Read what a producer sent and act on every complete record (False: nothing new)."""
        peer = self._state.peers[producer_id]
        if peer.sock is None:
            return False
        try:
            data = peer.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            return False
        except ConnectionResetError:
            data = b""
        except OSError as exc:
            self._disconnect(peer, f"cannot be read ({exc})")
            return True
        if not data:
            cut = f" mid-record ({len(peer.inbox)} bytes)" if peer.inbox else ""
            self._disconnect(peer, f"closed its connection{cut}")
            return True
        peer.inbox += data
        try:
            # Records before a broken one count: a parse stops there and the next raises.
            while peer.sock is not None and (requests := parse_requests(peer.inbox)):
                for request in requests:
                    self._handle(peer, request)
                    if peer.sock is None:
                        break  # done: whatever follows is ignored
        except IpcError as exc:
            self._disconnect(peer, f"broke the protocol ({exc})")
        return True

    def _handle(self, peer: Peer, request: Request) -> None:
        op, index = request.op, request.slot
        if op in (FILLED, RELEASE):
            if not 0 <= index < len(self._owner):
                raise IpcError(f"slot {index} out of range")
            if self._owner[index] != peer.producer_id:
                raise IpcError(f"slot {index} is not granted to producer {peer.producer_id}")
            if op == FILLED:
                self._owner[index] = _CONSUMER
                self._filled.append(
                    FilledSlot(index, peer.producer_id, request.tag, self._slots[index])
                )
            else:
                self._owner[index] = _FREE
                self._free.append(index)
        elif op == DONE:
            self._disconnect(peer, "finished")
            return
        if peer.wanted + request.want > len(self._owner):
            # A producer never asks for more than `prefetch` (<= num_slots) at once: this
            # one floods, and its queue would grow without bound.
            raise IpcError(
                f"asks for {peer.wanted + request.want} slots not yet granted; the pool has "
                f"{len(self._owner)}"
            )
        peer.wanted += request.want
        self._waiting.extend([peer.producer_id] * request.want)

    def _grant(self) -> None:
        """Grant free slots to waiting producers, first come first served; one send each."""
        peers = self._state.peers
        batches: dict[int, list[int]] = {}
        while self._free and self._waiting:
            producer_id = self._waiting.popleft()
            peers[producer_id].wanted -= 1
            if peers[producer_id].sock is None:
                continue
            index = self._free.popleft()
            self._owner[index] = producer_id
            batches.setdefault(producer_id, []).append(index)
        lost = False
        for producer_id, indices in batches.items():
            peer = peers[producer_id]
            if peer.sock is not None:
                lost |= not self._send_grants(peer, indices)
        if lost and self._free and self._waiting:
            self._grant()  # slots of a producer that went away: to the others

    def _send_grants(self, peer: Peer, indices: list[int]) -> bool:
        data = encode_grants(indices)
        try:
            sent = peer.sock.send(data) if peer.sock is not None else 0
        except (BrokenPipeError, ConnectionResetError):
            # Usually a producer that asked ahead and then finished: read its goodbye.
            while self._serve(peer.producer_id):
                pass
            if peer.sock is not None:
                self._disconnect(peer, "closed its connection")
            return False
        except OSError as exc:  # BlockingIOError included: it stopped reading
            self._disconnect(peer, f"cannot be reached ({exc})")
            return False
        if sent != len(data):
            self._disconnect(peer, "does not read its grants")
            return False
        return True

    def _on_exit(self, producer_id: int) -> None:
        peer = self._state.peers[producer_id]
        self._state.selector.unregister(peer.sentinel)
        self._state.handshakes.drop(producer_id, "exited during its handshake")
        # Whatever the process wrote before it ended is still queued: take it first.
        while self._serve(producer_id):
            pass
        if peer.sock is not None:  # its socket outlived it (shared with another process)
            self._disconnect(peer, "exited")
        peer.reap(self._io_timeout)
        if peer.exitcode:
            logger.warning("producer %d exited with code %s", producer_id, peer.exitcode)

    def _disconnect(self, peer: Peer, why: str) -> None:
        if peer.sock is not None:
            self._state.selector.unregister(peer.sock)
            peer.close_connection()
        peer.inbox.clear()
        peer.wanted = 0
        reclaimed = [i for i, owner in enumerate(self._owner) if owner == peer.producer_id]
        for index in reclaimed:
            self._owner[index] = _FREE
            self._free.append(index)
        self._waiting = deque(p for p in self._waiting if p != peer.producer_id)
        log = logger.debug if why == "finished" else logger.warning
        log("producer %d %s; %d slot(s) reclaimed", peer.producer_id, why, len(reclaimed))


def _check_slot_tensor(tensor: NpuTensor) -> None:
    """A slot must be fd-backed memory whose size no producer can change."""
    if tensor.memory_type not in (MemoryType.XRT_BO, MemoryType.DMA_FD):
        raise TensorError(f"slot tensor {tensor.info.name!r} is not fd-backed")
    fd = tensor.export_buffer()
    if fd < 0:
        raise TensorError(f"slot tensor {tensor.info.name!r} cannot be exported")
    try:
        fixed = size_is_fixed(fd)
    finally:
        os.close(fd)
    if not fixed:
        raise TensorError(
            f"slot tensor {tensor.info.name!r} is not sealed against resizing: a producer "
            "could truncate it under the consumer (SIGBUS); allocate slots with "
            "Runner.allocate_npu_tensor or HostMemory.shared"
        )
