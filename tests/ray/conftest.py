"""This test process as a Ray driver of the session's head, per test module: connected only
while a module needs it (a connected driver's background threads would otherwise run
through the rest of the suite, the memory-growth checks included)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def ray_driver(ray_head: Any) -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(address=ray_head.address, log_to_driver=False, configure_logging=False)
    try:
        yield ray_head
    finally:
        ray.shutdown()
