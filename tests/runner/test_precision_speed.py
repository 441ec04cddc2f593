"""An INT8 model never runs slower than its fp32 model without one line saying so: the runner
reads the speeds the compiler recorded on this CPU (each engine's int8 against fp32 on its
fastest engine) and warns where the engine it runs on is the slower; RunnerType.VAIML
measures the engines on the INT8 graph and keeps the faster, as for any model."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

import copyless as cl
from copyless.model import CompiledModel, compile_to_memory, precision_of, slower_than_fp32
from copyless.runner import RunnerFactory
from copyless.types import cpu_info
from model_helpers import calibration_folder, conv_net

pytest.importorskip("openvino")
OV, ORT, VAIML = cl.RunnerType.OPENVINO, cl.RunnerType.ONNXRUNTIME, cl.RunnerType.VAIML
FACTORY = "copyless.runner._factory"


@pytest.fixture(scope="module")
def int8(tmp_path_factory: pytest.TempPathFactory) -> CompiledModel:
    photos = calibration_folder(tmp_path_factory.mktemp("photos"), count=20, size=16)
    return compile_to_memory(conv_net(), precision="int8", calibration=photos)


def _recorded(
    model: CompiledModel, engines: dict[str, float], cpu: str | None = None
) -> CompiledModel:
    """``model`` with the speeds its record holds replaced: int8 ms per engine, fp32 5 ms
    on onnxruntime (its fastest), compiled on ``cpu`` (this one by default)."""
    record = precision_of(model.metadata)
    assert record is not None and record["precision"] == "int8"
    record["speed"] = {
        "fp32_ms": 5.0, "fp32_engine": "onnxruntime", "int8_ms": min(engines.values()),
        "engine": min(engines, key=lambda e: engines[e]), "cpu": cpu or cpu_info().name,
        "engines": {e: {"fp32_ms": 5.0, "int8_ms": ms} for e, ms in engines.items()},
    }  # fmt: skip
    return dataclasses.replace(model, metadata={**model.metadata, "precision": json.dumps(record)})


def test_the_line_names_the_engine_and_both_figures(int8: CompiledModel) -> None:
    slow = _recorded(int8, {"onnxruntime": 6.5, "openvino": 2.0})
    assert slower_than_fp32(slow.metadata, "onnxruntime") == (
        "its int8 graph runs slower on onnxruntime than its fp32 model (6.5 vs 5.0 ms on "
        "onnxruntime, measured when it was compiled on this CPU)"
    )
    assert slower_than_fp32(slow.metadata, "openvino") is None
    elsewhere = _recorded(int8, {"onnxruntime": 6.5, "openvino": 2.0}, cpu="another CPU")
    assert slower_than_fp32(elsewhere.metadata, "onnxruntime") is None  # not this CPU's figures


@pytest.mark.parametrize(("engine", "warned"), [(ORT, True), (OV, False)])
def test_a_runner_on_the_slower_engine_says_so(
    int8: CompiledModel, runners: list[cl.Runner], caplog: pytest.LogCaptureFixture,
    engine: cl.RunnerType, warned: bool,
) -> None:  # fmt: skip
    slow = _recorded(int8, {"onnxruntime": 6.5, "openvino": 2.0})
    with caplog.at_level(logging.WARNING, logger=FACTORY):
        runners.append(RunnerFactory.from_compiled(slow, None, engine))
    lines = [r.getMessage() for r in caplog.records if r.name == FACTORY]
    assert len(lines) == int(warned)
    if warned:
        assert lines[0].startswith(f"{slow.name}: its int8 graph runs slower on onnxruntime")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=FACTORY):  # fp32 asked by name: no such line
        runners.append(RunnerFactory.from_compiled(slow, {"inference_precision": "f32"}, engine))
    assert not [r for r in caplog.records if r.name == FACTORY]


def test_vaiml_runs_int8_where_it_measured_it_fastest(
    int8: CompiledModel, runners: list[cl.Runner], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Slower than fp32 on both engines (recorded): whichever VAIML keeps, it says so."""
    recorded = {"onnxruntime": 6.5, "openvino": 7.0}
    slow = _recorded(int8, recorded)
    with caplog.at_level(logging.WARNING, logger=FACTORY):
        runner = RunnerFactory.from_compiled(slow, {"cache_path": str(tmp_path)}, VAIML)
    runners.append(runner)
    assert runner.engine in (ORT, OV)
    assert runner.engine_reason.startswith(("measured fastest here", "cached"))
    lines = [r.getMessage() for r in caplog.records if r.name == FACTORY]
    engine = {ORT: "onnxruntime", OV: "openvino"}[runner.engine]
    assert lines == [f"{slow.name}: its int8 graph runs slower on {engine} than its fp32 model "
                     f"({recorded[engine]} vs 5.0 ms on onnxruntime, measured when it was "
                     "compiled on this CPU)"]  # fmt: skip
