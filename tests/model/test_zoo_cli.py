"""``copyless-zoo``: list, build to a file, photos, and exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import skimage.data
from PIL import Image

from copyless.apps.zoo import main
from copyless.model import zoo


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("zoo-cli-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(zoo.CACHE_ENV, str(root))
        yield root


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == zoo.names()


def test_build_to_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "models" / "det.onnx"
    assert main(["ppocr-det", "-o", str(out)]) == 0
    shown = capsys.readouterr()
    assert shown.out.strip() == str(out)
    assert "ppocr-det: built in" in shown.err
    assert out.read_bytes() == zoo.build("ppocr-det", progress=False).read_bytes()
    onnx.checker.check_model(onnx.load(str(out)))
    assert main(["ppocr-det", "-o", str(out), "-q"]) == 0
    again = capsys.readouterr()
    assert again.err == "" and again.out.strip() == str(out)


def test_build_prints_cache_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["efficientnet-lite0", "-q"]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed == zoo.cache_path("efficientnet-lite0") and printed.is_file()


def test_unknown_name_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mobilenet-v9", "-o", "x.onnx"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'mobilenet-v9'" in err and "resnet50" in err
    assert not Path("x.onnx").exists()
    assert main([]) == 2
    assert main(["--photo", "nonsense"]) == 2
    assert main(["--no-such-flag"]) == 2
    capsys.readouterr()


def test_photo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--photo", "chelsea"]) == 0
    png = Path(capsys.readouterr().out.strip())
    np.testing.assert_array_equal(np.asarray(Image.open(png)), skimage.data.chelsea())
    target = tmp_path / "cat.jpg"
    assert main(["--photo", "chelsea.jpg", "-o", str(target)]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    with Image.open(target) as image:
        assert image.format == "JPEG" and image.size == (451, 300)


def test_runs_as_a_program(tmp_path: Path) -> None:
    env = dict(os.environ, **{zoo.CACHE_ENV: str(tmp_path)})
    done = subprocess.run(
        [sys.executable, "-m", "copyless.apps.zoo", "--list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "efficientnet-lite0" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "copyless.apps.zoo", "nope"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "unknown model" in bad.stderr
