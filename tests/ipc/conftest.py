"""Fixtures of the ipc tests."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def listener() -> Iterator[tuple[socket.socket, str]]:
    """``(socket, address)``: a listening abstract AF_UNIX socket (backlog 4, 30 s timeout)."""
    address = f"\0copyless-test-{secrets.token_hex(8)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(address)
    sock.listen(4)
    sock.settimeout(30)
    yield sock, address
    sock.close()
