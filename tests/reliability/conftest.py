"""Reliability fixtures: the small net compiled in both forms, a crash-safe loader child."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from reliability_helpers import LoadChild, small_net

from copyless.model import CompiledModel, compile_model, compile_to_memory


@pytest.fixture(scope="session")
def net() -> onnx.ModelProto:
    return small_net()


@pytest.fixture(scope="session")
def compiled(net: onnx.ModelProto) -> CompiledModel:
    return compile_to_memory(net)


@pytest.fixture(scope="session")
def rai_path(net: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_model(net, tmp_path_factory.mktemp("rai") / "small.rai")


@pytest.fixture(scope="module")
def load_child() -> Iterator[LoadChild]:
    child = LoadChild()
    yield child
    child.close()
