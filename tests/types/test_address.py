"""The one address parser (copyless-serve's listeners, copyless-video's ``--serve`` and
``--metrics-port``): what it accepts, and what it refuses, in one line that quotes the text."""

from __future__ import annotations

import os

import pytest

from copyless.types import Address, OptionError, parse_address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8080", Address("127.0.0.1", 8080)),
        (":0", Address("127.0.0.1", 0)),
        ("0", Address("127.0.0.1", 0)),
        ("0.0.0.0:9000", Address("0.0.0.0", 9000)),
        ("localhost:65535", Address("localhost", 65535)),
        ("[::1]:9000", Address("::1", 9000)),
        ("[::]:0", Address("::", 0)),
        ("[fe80::1%eth0]:80", Address("fe80::1%eth0", 80)),
    ],
)
def test_tcp_forms(text: str, expected: Address) -> None:
    assert parse_address(text) == expected
    assert parse_address(text, unix=False) == expected


def test_the_default_host_is_the_callers() -> None:
    assert parse_address("80", default_host="0.0.0.0") == Address("0.0.0.0", 80)
    assert parse_address(":80", default_host="::") == Address("::", 80)


def test_str_writes_what_parse_reads() -> None:
    for text in ("127.0.0.1:80", "[::1]:9000"):
        assert str(parse_address(text)) == text


def test_unix_sockets(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "s.sock")
    assert parse_address(f"unix:{path}") == Address("", 0, path)
    assert str(parse_address(f"unix:{path}")) == f"unix:{path}"
    assert parse_address("unix:rel.sock").path == os.path.abspath("rel.sock")
    for bad in ("unix:", "unix:a\x00b", "unix:" + "x" * 108):
        with pytest.raises(OptionError, match="a Unix socket needs a path of 1 to 107 bytes"):
            parse_address(bad)
    with pytest.raises(OptionError, match="TCP only, give HOST:PORT"):
        parse_address(f"unix:{path}", unix=False)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "a port from 0 to 65535"),
        ("host:", "a port from 0 to 65535"),
        ("host:http", "a port from 0 to 65535"),
        ("1:65536", "a port from 0 to 65535"),
        ("-1", "a port from 0 to 65535"),
        ("host:+80", "a port from 0 to 65535"),
        ("host:\u0663", "a port from 0 to 65535"),  # ARABIC-INDIC DIGIT THREE: not a port
        ("::1:8000", r"an IPv6 host goes in brackets, \[::1\]"),
        ("::1", "an IPv6 host goes in brackets"),
        ("[::1:8000", "an IPv6 host is"),
        ("::1]:8000", "an IPv6 host is"),
        ("[]:80", "an IPv6 host is"),
    ],
)
def test_refused_forms(text: str, why: str) -> None:
    with pytest.raises(OptionError, match=why) as caught:
        parse_address(text)
    assert repr(text) in str(caught.value) and "HOST:PORT" in str(caught.value)
    assert isinstance(caught.value, ValueError)  # argparse and old callers catch ValueError
