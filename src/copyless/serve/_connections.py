"""The REST listener's connections: who is at the other end, how long they may take, how many
there may be.

uvicorn (with httptools, the ``serve`` extra's parser) runs the REST app; this module gives it
a connection class of its own, :func:`guarded_protocol`, which adds what uvicorn leaves out:

* the client of each connection (:class:`ConnectionPeer`): ``SO_PEERCRED`` on a Unix socket, the
  kernel's socket table for a TCP client of this host (looked up once, when a request first
  needs it), handed to the app in the request's ``scope["state"]`` under :data:`PEER`;
* a header deadline: a connection that sends nothing, or sends its request line and headers
  slowly (slowloris), is closed ``header_timeout_s`` after it opened or began a request
  (uvicorn's own keep-alive timeout closes idle connections between requests);
* a connection budget: past ``max_connections`` open connections a new one may only ask for
  health (``/v2/health/...``; everything else gets 503 and the connection closes), with a
  one-second header deadline; while the process's descriptors reach into the second half of
  the reserve, it is closed at once. One warning line per 10 s says so.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ._access import Client, tcp_peer_uid, unix_peer
from ._budget import DescriptorBudget, Throttled, open_descriptors

__all__ = ["OVER_BUDGET", "PEER", "ConnectionPeer", "guarded_protocol"]

logger = logging.getLogger(__name__)
_throttled = Throttled(logger)

#: ``scope["state"]`` keys: the connection's :class:`ConnectionPeer`; whether it is over the budget.
PEER = "copyless.peer"
OVER_BUDGET = "copyless.over_budget"
#: The header deadline of a connection over the budget, seconds.
_OVER_BUDGET_TIMEOUT_S = 1.0


class ConnectionPeer:
    """One connection's client, found once (the connection's end cannot change owner)."""

    def __init__(self, sock: socket.socket | None) -> None:
        self._client: Client | None = None
        self._sock_family = sock.family if sock is not None else None
        self._creds = unix_peer(sock) if sock is not None and sock.family == socket.AF_UNIX \
            else None  # fmt: skip
        self._addresses: tuple[Any, Any] | None = None
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                self._addresses = (sock.getpeername()[:2], sock.getsockname()[:2])
            except OSError:
                self._addresses = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = self._find()
        return self._client

    def _find(self) -> Client:
        if self._sock_family == socket.AF_UNIX:
            if self._creds is None:
                return Client("unix")
            _, uid, gid = self._creds
            return Client("unix", uid, gid)
        if self._addresses is not None:
            peer, local = self._addresses
            return Client("tcp", locate=lambda: (tcp_peer_uid(peer, local), None))
        return Client("tcp")


def guarded_protocol(header_timeout_s: float, max_connections: int,
                     budget: DescriptorBudget) -> type[HttpToolsProtocol]:  # fmt: skip
    """uvicorn's httptools connection with the module docstring's additions; pass it as
    ``uvicorn.Config(http=...)``."""

    class GuardedHttpProtocol(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        _timeout_s = header_timeout_s

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            count = len(self.connections)
            over = count > max_connections
            if over and open_descriptors() > budget.limit - budget.reserve // 2:
                _throttled.warning("closed", f"REST: {count} connections are open and the "
                                   "descriptors reach into the reserve: new ones are closed "
                                   "at once")  # fmt: skip
                transport.abort()
                return
            if over:
                self._timeout_s = min(header_timeout_s, _OVER_BUDGET_TIMEOUT_S)
                _throttled.warning("over", f"REST: {count} connections are open, past the "
                                   f"budget of {max_connections}: new ones answer health "
                                   "checks only")  # fmt: skip
            peer = ConnectionPeer(transport.get_extra_info("socket"))
            self.app_state = {**self.app_state, PEER: peer, OVER_BUDGET: over}
            self._arm()

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(self._timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedHttpProtocol
