"""Core dependencies are what the core needs: decoding, drawing and progress bars are extras,
and the core imports and runs without them."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra brings tomli on 3.10
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
CORE = {"numpy", "onnx", "onnxruntime", "ml_dtypes", "platformdirs"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_core_dependencies_are_the_cores() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert _names(project["dependencies"]) == CORE
    extras = project["optional-dependencies"]
    assert _names(extras["vision"]) == {"simplejpeg", "pillow"}
    assert "tqdm" in _names(extras["models"])


def test_the_core_runs_without_the_extras(tmp_path: Path) -> None:
    """simplejpeg, Pillow and tqdm made unimportable: copyless imports, compiles, runs; a
    decode says which extra to install."""
    code = f"""
        import sys
        for blocked in ("simplejpeg", "PIL", "PIL.Image", "PIL.ImageDraw", "tqdm"):
            sys.modules[blocked] = None  # import raises ImportError
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import numpy as np
        import copyless as cl
        import copyless.vision, copyless.model.zoo, copyless.apps.infer_async
        from model_helpers import conv_net
        model = cl.compile_model(conv_net(), {str(tmp_path / "m.rai")!r})
        with cl.RunnerFactory.create_runner(model) as runner:
            (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
            (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
            x, y = runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)
            assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
        try:
            copyless.vision.decode(b"\\xff\\xd8\\xff not really a jpeg")
        except cl.UnsupportedError as exc:
            print("decode:", exc)
        try:
            image = np.zeros((4, 4, 3), np.uint8)
            copyless.vision.draw_boxes(image, [], {str(tmp_path / "b.png")!r})
        except cl.UnsupportedError as exc:
            print("draw:", exc)
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=300, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all("copyless[vision]" in line for line in lines), lines
    assert lines[0].startswith("decode: simplejpeg") and lines[1].startswith("draw: PIL")


def _extra(name: str) -> list[str]:
    extras: dict[str, list[str]] = tomllib.loads(PYPROJECT.read_text())["project"][
        "optional-dependencies"
    ]
    return extras[name]


@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12", "3.13"])
def test_every_extra_resolves_on_each_claimed_python(python: str) -> None:
    """The packages with no release for some CPython carry a marker that leaves them out
    there: rapidocr-onnxruntime stops at 3.12, onnxruntime-gpu 1.31 and atheris 3 start at
    3.11. (.ci/pythons installs `.[all]` on each for real; this keeps the markers honest.)"""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    env = {**default_environment(), "python_version": python, "python_full_version": python + ".0"}
    gaps = {  # package -> the Pythons it has no wheel or release for
        "rapidocr-onnxruntime": {"3.13"},
        "onnxruntime-gpu": {"3.10"},
        "cupy-cuda13x": {"3.10"},
    }
    for extra in ("models", "cuda", "dev"):
        for line in _extra(extra):
            req = Requirement(line)
            applies = req.marker is None or req.marker.evaluate(env)
            if python in gaps.get(req.name, set()):
                assert not applies, f"{req} is asked for on Python {python}"
            if req.name == "atheris" and applies:
                assert (python == "3.10") == ("==2.3.0" in str(req.specifier)), str(req)
    models = {Requirement(line).name for line in _extra("models")}
    assert {"rapidocr", "rapidocr-onnxruntime"} <= models


def test_development_tools_stay_out_of_what_users_install() -> None:
    """atheris (fuzzing; builds from source where it has no wheel) is in `dev`, which .ci/run
    installs, never in `test` or `all`."""
    for extra in ("test", "all"):
        assert not any(r.startswith("atheris") for r in _extra(extra)), extra
    assert any(r.startswith("atheris") for r in _extra("dev"))
    ci = (PYPROJECT.parent / ".ci" / "run").read_text()
    assert '-e ".[dev]"' in ci and "bash .ci/pythons" in ci
