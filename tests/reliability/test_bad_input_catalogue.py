"""The catalogue of bad inputs (catalogue.py, also run by benchmarks/bad_inputs.py): at least
30 cases over files, options, tensors and call orders, each answered by its expected status
or a clear copyless error; the console scripts' mistakes (catalogue_apps.py) and inputs as
users have them (catalogue_inputs.py, issue 40), each in a child process."""

from __future__ import annotations

import collections
from pathlib import Path

import onnx
import pytest
from catalogue import CATALOGUE, Case, Kit, run_case
from catalogue_apps import APPS
from catalogue_inputs import INPUTS

EVERY = [*CATALOGUE, *APPS, *INPUTS]


@pytest.fixture(scope="module")
def kit(net: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory):
    kit = Kit(tmp_path_factory.mktemp("catalogue"), net)
    yield kit
    kit.close()


def test_the_catalogue_covers_every_area() -> None:
    areas = collections.Counter(case.area for case in EVERY)
    assert len(EVERY) >= 60 and set(areas) == {"file", "option", "tensor", "call", "app", "input"}
    assert min(areas.values()) >= 5 and areas["app"] >= 30 and areas["input"] >= 25
    scripts = {case.what.split(":")[0] for case in APPS}
    assert {"detect", "zerocopy", "compile", "video", "batch", "core install"} <= scripts


@pytest.mark.parametrize("case", EVERY, ids=lambda c: f"{c.area}:{c.what}")
def test_each_bad_input_gets_its_answer(kit: Kit, case: Case) -> None:
    outcome = run_case(kit, case)
    assert outcome.ok, f"expected {case.expected}, got {outcome.got}"
    assert kit.runner.execute([[kit.x]], [[kit.y]]).name == "SUCCESS"  # still healthy


def test_the_script_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bad_inputs.py"
    spec = importlib.util.spec_from_file_location("bad_inputs", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quiet", "--api-only"]) == 0
    assert f"{len(CATALOGUE)} bad inputs" in capsys.readouterr().out  # the API cases
