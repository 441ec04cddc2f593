"""Servers for the serve tests: a repository of real compiled models (the small conv net at
batch 1 and 4, EfficientNet-Lite0 with its RGBx uint8 input) served in this process on free
loopback ports, driven with tritonclient."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("tritonclient.grpc")
pytest.importorskip("starlette")

from serve_helpers import build_repository, lite0_path, start

from copyless.serve import InferenceServer


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``conv`` (batch 1), ``conv4`` (batch 4) and ``lite0`` (batch 1, RGBx uint8)."""
    root = tmp_path_factory.mktemp("repository")
    build_repository(root)
    (root / "lite0").mkdir()
    shutil.copy(lite0_path(), root / "lite0" / "lite0.rai")
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[InferenceServer]:
    """One server for a test module, batching with a 2 ms delay."""
    served = start(repository, max_queue_delay_ms=2.0)
    yield served
    served.stop()
