"""Consumer-side bookkeeping of one producer process and its connection."""

from __future__ import annotations

import logging
import socket
from typing import Any

logger = logging.getLogger(__name__)


class Peer:
    """A producer process, its socket once it has connected, and its exit code once reaped.

    The connection and the process end separately: a producer may say ``done`` and still
    be exiting, or die before it ever connected. It counts as running until both ended.
    """

    __slots__ = ("exitcode", "inbox", "process", "producer_id", "sentinel", "sock", "wanted")

    def __init__(self, producer_id: int, process: Any) -> None:
        self.producer_id = producer_id
        self.process = process
        self.sentinel: int = process.sentinel
        self.sock: socket.socket | None = None
        self.exitcode: int | None = None
        self.inbox = bytearray()  # control-stream bytes received but not yet a whole record
        self.wanted = 0  # slots it asked for and has not been granted yet (its queue entries)

    @property
    def pid(self) -> int:
        return int(self.process.pid) if self.process is not None else -1

    @property
    def connected(self) -> bool:
        return self.sock is not None

    @property
    def exited(self) -> bool:
        return self.process is None

    @property
    def running(self) -> bool:
        return self.sock is not None or self.process is not None

    def close_connection(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def reap(self, timeout: float) -> None:
        """Join the process (terminate, then kill, after ``timeout``) and free its handles."""
        process, self.process = self.process, None
        if process is None:
            return
        process.join(timeout)
        if process.is_alive():
            logger.warning(
                "producer %d (pid %d) did not stop; terminating", self.producer_id, process.pid
            )
            process.terminate()
            process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
        self.exitcode = process.exitcode
        process.close()  # frees the sentinel fd now rather than at collection
