"""Runner fixtures: small real ONNX models compiled in memory, runners on every backend."""

from __future__ import annotations

import onnx
import pytest
from runner_helpers import conv_net

import copyless as cl
from copyless.model import CompiledModel, compile_to_memory

BACKENDS = [cl.RunnerType.ONNXRUNTIME, cl.RunnerType.OPENVINO]


@pytest.fixture(params=BACKENDS, ids=lambda r: r.name.lower())
def runner_type(request: pytest.FixtureRequest) -> cl.RunnerType:
    rt: cl.RunnerType = request.param
    return rt


@pytest.fixture(scope="session")
def tiny() -> tuple[onnx.ModelProto, CompiledModel]:
    model = conv_net()
    return model, compile_to_memory(model)


@pytest.fixture(scope="session")
def tiny_rgbx() -> tuple[onnx.ModelProto, CompiledModel]:
    model = conv_net()
    return model, compile_to_memory(model, input_format="rgbx", mean=(127.0,) * 3, std=(128.0,) * 3)


@pytest.fixture(scope="session")
def tiny_batch4() -> tuple[onnx.ModelProto, CompiledModel]:
    model = conv_net(batch="N")
    return model, compile_to_memory(model, batch_size=4)
