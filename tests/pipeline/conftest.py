"""Pipeline fixtures: the small real conv net compiled in memory, runners on both engines."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import copyless as cl
from copyless.model import CompiledModel, compile_to_memory
from model_helpers import conv_net

ENGINES = [cl.RunnerType.ONNXRUNTIME, cl.RunnerType.OPENVINO]


@pytest.fixture(params=ENGINES, ids=lambda r: r.name.lower())
def runner_type(request: pytest.FixtureRequest) -> cl.RunnerType:
    rt: cl.RunnerType = request.param
    return rt


@pytest.fixture(scope="session")
def net() -> onnx.ModelProto:
    return conv_net(batch="N")


@pytest.fixture(scope="session")
def compiled(net: onnx.ModelProto) -> Callable[[int], CompiledModel]:
    """``compiled(batch)``: the conv net compiled for that batch size (cached)."""
    cache: dict[int, CompiledModel] = {}

    def make(batch: int) -> CompiledModel:
        if batch not in cache:
            cache[batch] = compile_to_memory(net, batch_size=batch)
        return cache[batch]

    return make


@pytest.fixture(scope="session")
def reference(net: onnx.ModelProto) -> Callable[[np.ndarray], np.ndarray]:
    """onnxruntime's logits for one [1, 3, 16, 16] input: the ground truth."""
    session = ort.InferenceSession(net.SerializeToString(), providers=["CPUExecutionProvider"])

    def run(x: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(None, {"input": x})[0])

    return run

