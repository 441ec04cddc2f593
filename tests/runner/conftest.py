"""Runner fixtures: small real ONNX models compiled in memory, runners on every backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import onnx
import pytest
from runner_helpers import conv_net

import copyless as cl
from copyless.model import CompiledModel, compile_to_memory
from copyless.runner import Runner, RunnerFactory

BACKENDS = [cl.RunnerType.ONNXRUNTIME, cl.RunnerType.OPENVINO]


@pytest.fixture(params=BACKENDS, ids=lambda r: r.name.lower())
def runner_type(request: pytest.FixtureRequest) -> cl.RunnerType:
    rt: cl.RunnerType = request.param
    return rt


@pytest.fixture
def make_runner(runner_type: cl.RunnerType) -> Iterator[Callable[..., Runner]]:
    """``make_runner(compiled, **options)``: a runner closed after the test."""
    made: list[Runner] = []

    def make(compiled: CompiledModel, **options: Any) -> Runner:
        runner = RunnerFactory.from_compiled(compiled, options, runner_type)
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close()


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
