"""Where a server listens: the one parser of ``HOST:PORT`` (and ``unix:PATH``) for every
command line that takes an address (copyless-serve's listeners, copyless-video's
``--serve`` and ``--metrics-port``).

Accepted: ``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` and ``PORT`` (the default host), and,
where the caller serves on Unix sockets, ``unix:PATH``. Refused with an :class:`OptionError`
(a ``ValueError``) that quotes the text: a port that is not 0-65535 in ASCII digits, an IPv6
host without its brackets (``::1:80`` is ambiguous), a bracket left open, an empty or too
long socket path, and ``unix:`` where the caller has no Unix sockets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ._errors import OptionError

__all__ = ["Address", "parse_address"]

#: The longest socket path ``sockaddr_un`` holds (108 bytes with its terminating zero).
MAX_SOCKET_PATH = 107


@dataclass(frozen=True, slots=True)
class Address:
    """A TCP ``host:port``, or a Unix socket at ``path`` (``host`` empty, ``port`` 0)."""

    host: str
    port: int
    path: str | None = None

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str, default_host: str = "127.0.0.1", *, unix: bool = True) -> Address:
    """``HOST:PORT``, ``[V6]:PORT``, ``:PORT``, ``PORT`` or (with ``unix``) ``unix:PATH``;
    the host is ``default_host`` unless one is named. Raises :class:`OptionError`."""
    if text.startswith("unix:"):
        if not unix:
            raise OptionError(f"{text!r}: this listens on TCP only, give HOST:PORT")
        path = text[len("unix:") :]
        if not path or "\x00" in path or len(os.fsencode(path)) > MAX_SOCKET_PATH:
            raise OptionError(
                f"{text!r}: a Unix socket needs a path of 1 to {MAX_SOCKET_PATH} bytes"
            )
        return Address("", 0, os.path.abspath(path))
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    if host.startswith("[") or host.endswith("]"):
        if not (host.startswith("[") and host.endswith("]") and len(host) > 2):
            raise OptionError(f"{text!r} is not HOST:PORT: an IPv6 host is [ADDRESS]:PORT")
        host = host[1:-1]
    elif ":" in host:
        raise OptionError(f"{text!r} is not HOST:PORT: an IPv6 host goes in brackets, [{host}]")
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise OptionError(f"{text!r} is not HOST:PORT (a port from 0 to 65535)")
    return Address(host or default_host, int(port))
