"""precision="fastest" (model/_fastest.py): bf16 and int8 made where they can be, held to the
same top-1 agreement on the same images, the fastest kept if it beats fp32 by FASTER, else
fp32 with the reasons; real EfficientNet-Lite0 on real photo crops."""

from __future__ import annotations

from pathlib import Path

import pytest

from copyless.model import (
    CompiledModel,
    compile_to_memory,
    precision_line,
    precision_of,
    run_precision,
    zoo,
)
from copyless.model import _bf16 as bf16
from copyless.model import _fastest as fastest
from copyless.types import DataType
from model_helpers import calibration_folder

pytest.importorskip("openvino")
VIEW = {"input_format": "rgbx", "mean": (127, 127, 127), "std": (128, 128, 128),
        "resize": "crop:0.875"}  # fmt: skip


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return calibration_folder(tmp_path_factory.mktemp("photos"), count=40)


@pytest.fixture(scope="module")
def effnet() -> Path:
    return zoo.build("efficientnet-lite0", progress=False)


@pytest.fixture(scope="module")
def chosen(effnet: Path, photos: Path) -> CompiledModel:
    """Any agreement will do (max_drop=100): the choice is the speed's."""
    return compile_to_memory(effnet, precision="fastest", calibration=photos, max_drop=100,
                             **VIEW)  # fmt: skip


def test_fastest_keeps_the_fastest_candidate(chosen: CompiledModel) -> None:
    record = precision_of(chosen.metadata)
    assert record is not None and record["precision"] in ("int8", "bf16")
    others = record["fastest"]["candidates"]
    ratios = {record["precision"]: record["speed"]["ratio"]}
    ratios.update({name: r["speed"]["ratio"] for name, r in others.items() if "speed" in r})
    assert record["precision"] == max(ratios, key=lambda name: ratios[name])
    assert record["speed"]["ratio"] >= fastest.FASTER
    assert record["fastest"]["minimum"] == 0.0 and "kept: top-1 as fp32" in record["fastest"]["why"]
    if record["precision"] == "int8":  # the graph is the INT8 one, its logits an INT8 view
        assert chosen.outputs[0].hw.data_type is DataType.INT8
        assert run_precision(chosen.metadata) == "f32"
    else:
        assert run_precision(chosen.metadata) == "bf16"
    line = precision_line(chosen.metadata)
    assert line is not None and "chosen by precision='fastest'" in line


def test_fastest_keeps_fp32_and_says_why(
    effnet: Path, photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fastest, "FASTER", 1000.0)  # no CPU runs anything 1000x fp32's speed
    model = compile_to_memory(effnet, precision="fastest", calibration=photos, max_drop=100,
                              **VIEW)  # fmt: skip
    record = precision_of(model.metadata)
    assert record is not None and record["precision"] == "fp32"
    assert set(record["declined"]) == {"bf16", "int8"}
    assert "speed" in record["declined"]["int8"]
    assert run_precision(model.metadata) == "f32"
    assert model.outputs[0].hw.data_type is DataType.FLOAT32  # the fp32 graph, not the int8
    line = precision_line(model.metadata)
    assert line is not None and line.startswith("fp32 model: bf16 declined (")
    assert "; int8 declined (top-1 as fp32 on " in line and "needed 1000.0x" in line


def test_a_cpu_without_bf16_weighs_int8_alone(
    effnet: Path, photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bf16, "cpu_capabilities", lambda _core=None: ("FP32", "INT8", "BIN"))
    model = compile_to_memory(effnet, precision="fastest", calibration=photos, max_drop=100,
                              **VIEW)  # fmt: skip
    record = precision_of(model.metadata)
    assert record is not None
    why = record["fastest"]["why"] if "fastest" in record else record["why"]
    assert "bf16: precision='bf16' refused: this CPU" in why or "bf16 declined (precision=" in why
    if record["precision"] == "int8":
        assert "has no BF16 arithmetic" in record["fastest"]["candidates"]["bf16"]["why"]
