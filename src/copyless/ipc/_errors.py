"""Errors of the IPC layer.

::

    CopylessError
     +-- IpcError                  garbage, truncated or oversized message; socket failure
          +-- PeerClosedError      the peer closed the connection (or died) between messages

After any :class:`IpcError` other than :class:`PeerClosedError` the byte stream is out of
step: drop the connection.
"""

from __future__ import annotations

from ..types import CopylessError


class IpcError(CopylessError):
    """A message that cannot be read or sent: garbage, truncated, too large, socket error."""


class PeerClosedError(IpcError):
    """The peer closed its end (cleanly or by dying) at a message boundary."""
