"""The producer side of a :class:`~copyless.ipc.SlotPool`: runs in a child process.

A producer maps every slot of the pool once, at connection, then asks the consumer for
slots, writes frames straight into them (the HW view the runner reads: no copy on the way
to the engine) and hands back slot indices. Only small JSON control messages travel per
frame.

Control messages (producer -> consumer): ``hello``, ``want`` (n more slots),
``filled`` (slot, tag, want), ``release`` (slot unused, want), ``done``.
Consumer -> producer: ``welcome`` (num_slots, prefetch), one tensors message per slot,
then ``grant`` (slot) messages.
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..memory import NpuTensor
from ._control import DONE, FILLED, NO_SLOT, RELEASE, WANT, encode_request, parse_grants
from ._errors import IpcError, PeerClosedError
from ._transport import decode_tensors
from ._wire import recv_message, send_message

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT = 30.0
"""Seconds :meth:`Producer.connect` waits, by default, for the pool to take it and send
every slot (the consumer accepts a producer in its ``poll``)."""
MAX_SLOTS = 1 << 16

ProducerTarget = Callable[..., None]
"""``target(producer, *args)``: a module-level function (spawned processes import it)."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One granted slot: its index and its input tensors (DMA_FD, shared with the consumer)."""

    index: int
    tensors: tuple[NpuTensor, ...]


class Producer:
    """A connection to the consumer, with every slot mapped. Built by the pool's child entry.

    Typical use inside ``target(producer, ...)``::

        for frame_id, jpeg in enumerate(source):
            slot = producer.acquire()              # blocks while every slot is busy
            decode_into(slot.tensors[0].numpy(), jpeg)
            producer.submit(slot, tag=frame_id)

    Raises :class:`~copyless.ipc.PeerClosedError` when the consumer has gone.
    """

    __slots__ = (
        "_granted",
        "_inbox",
        "_prefetch",
        "_producer_id",
        "_slots",
        "_sock",
        "_timeout",
        "_wanted",
    )

    def __init__(
        self, sock: socket.socket, producer_id: int, slots: Sequence[Slot], prefetch: int
    ) -> None:
        self._sock: socket.socket | None = sock
        self._producer_id = producer_id
        self._slots = tuple(slots)
        self._prefetch = max(1, prefetch)
        self._granted: deque[int] = deque()
        self._wanted = 0
        self._inbox = bytearray()
        self._timeout: float | None = sock.gettimeout()

    @classmethod
    def connect(
        cls, address: str, token: str, producer_id: int, *, timeout: float = CONNECT_TIMEOUT
    ) -> Producer:
        """Connect to a pool at ``address`` and map its slots (called in the child).

        The whole handshake (connect, hello, welcome, every slot) must be done within
        ``timeout`` seconds: :class:`~copyless.ipc.IpcError` otherwise.
        """
        deadline = time.monotonic() + timeout
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            send_message(sock, {"op": "hello", "token": token, "producer": producer_id},
                         timeout=_left(deadline))  # fmt: skip
            welcome, fds = recv_message(sock, timeout=_left(deadline))
            count = _small_int(welcome.get("num_slots"), MAX_SLOTS)
            if welcome.get("op") != "welcome" or fds or count is None:
                raise IpcError(f"unexpected greeting from the consumer: {welcome.get('op')!r}")
            slots = [_recv_slot(sock, index, deadline) for index in range(count)]
            sock.settimeout(None)
        except TimeoutError as exc:
            sock.close()
            raise IpcError(f"the pool did not take producer {producer_id} in {timeout} s") from exc
        except OSError as exc:
            sock.close()
            raise IpcError(f"cannot connect to the pool: {exc}") from exc
        except BaseException:
            sock.close()
            raise
        prefetch = _small_int(welcome.get("prefetch", 1), len(slots)) or 1
        return cls(sock, producer_id, slots, prefetch)

    @property
    def producer_id(self) -> int:
        return self._producer_id

    @property
    def num_slots(self) -> int:
        return len(self._slots)

    @property
    def closed(self) -> bool:
        return self._sock is None

    def acquire(self, timeout: float | None = None) -> Slot:
        """The next granted slot; blocks until the consumer frees one (back-pressure).

        Raises ``TimeoutError`` after ``timeout`` seconds (one deadline for the whole wait),
        :class:`PeerClosedError` when the consumer has gone.
        """
        sock = self._live()
        if not self._granted and self._wanted == 0:
            self._request(sock, WANT)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._granted:
            left = None if deadline is None else _left(deadline)
            if left != self._timeout:
                sock.settimeout(left)
                self._timeout = left
            self._receive(sock)
        return self._slots[self._granted.popleft()]

    def submit(self, slot: Slot, tag: Any = None) -> None:
        """Hand a written slot to the consumer; ``tag`` (JSON-able) comes back with it.

        An ``int`` or ``None`` tag travels as a fixed binary field; others as JSON.
        """
        self._request(self._live(), FILLED, slot.index, tag)

    def release(self, slot: Slot) -> None:
        """Give back a slot without submitting it (e.g. a frame that failed to decode)."""
        self._request(self._live(), RELEASE, slot.index)

    def close(self) -> None:
        """Tell the consumer this producer is done and disconnect (idempotent)."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        try:
            self._send(sock, encode_request(DONE))
        except IpcError:
            pass  # the consumer has gone already; nothing to tell
        finally:
            sock.close()
            self._slots = ()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, sock: socket.socket, op: int, slot: int = NO_SLOT, tag: Any = None) -> None:
        # Keep `prefetch` slots asked for, so the next grant is on its way while we decode.
        want = max(0, self._prefetch - len(self._granted) - self._wanted)
        self._send(sock, encode_request(op, slot, want, tag))
        self._wanted += want

    @staticmethod
    def _send(sock: socket.socket, record: bytes) -> None:
        try:
            sock.sendall(record)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise PeerClosedError("the consumer closed the connection") from exc
        except OSError as exc:  # TimeoutError included: a consumer that stopped reading
            raise IpcError(f"send to the consumer failed: {exc}") from exc

    def _receive(self, sock: socket.socket) -> None:
        """Block for at least one byte of grants; take every complete grant that came."""
        try:
            data = sock.recv(4096)
        except TimeoutError:
            raise  # nothing consumed: the caller may try again
        except ConnectionResetError as exc:
            raise PeerClosedError("the consumer reset the connection") from exc
        except OSError as exc:
            raise IpcError(f"receive from the consumer failed: {exc}") from exc
        if not data:
            raise PeerClosedError("the consumer closed the connection")
        self._inbox += data
        for index in parse_grants(self._inbox):
            if not self._valid(index) or self._wanted <= 0:
                raise IpcError(f"unexpected grant of slot {index} from the consumer")
            self._granted.append(index)
            self._wanted -= 1

    def _valid(self, index: Any) -> bool:
        return isinstance(index, int) and 0 <= index < len(self._slots)

    def _live(self) -> socket.socket:
        if self._sock is None:
            raise PeerClosedError("producer is closed")
        return self._sock


def _left(deadline: float) -> float:
    """Seconds until ``deadline`` (a tiny positive number once it has passed: a socket
    timeout of 0 would mean non-blocking, not "time is up")."""
    return max(1e-3, deadline - time.monotonic())


def _small_int(value: Any, limit: int) -> int | None:
    """``value`` when it is an int in 1..limit, else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit
    return int(value) if ok else None


def _recv_slot(sock: socket.socket, index: int, deadline: float) -> Slot:
    header, fds = recv_message(sock, timeout=_left(deadline))
    tensors = decode_tensors(header, fds)
    if header.get("slot") != index:
        raise IpcError(f"slot {header.get('slot')!r} arrived where slot {index} was expected")
    return Slot(index, tuple(tensors))


def producer_main(
    address: str, token: str, producer_id: int, target: ProducerTarget, args: tuple[Any, ...]
) -> None:
    """Child-process entry: connect, run ``target(producer, *args)``, say done.

    A consumer that goes away ends the producer with exit code 1 and a log line, not a
    traceback.
    """
    try:
        producer = Producer.connect(address, token, producer_id)
    except IpcError as exc:
        logger.warning("producer %d: cannot join the pool (%s); stopping", producer_id, exc)
        sys.exit(1)
    try:
        with producer:
            target(producer, *args)
    except PeerClosedError:
        logger.warning("producer %d: the consumer has gone; stopping", producer_id)
        sys.exit(1)
