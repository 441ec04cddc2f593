"""copyless-bench from an installed wheel (not an editable checkout): it runs from any folder,
offers its built-in suites, refuses the checkout's programs in one line, and never imports
or runs a ``benchmarks/`` (or ``copyless/``) it finds in the working directory.

The wheel is built from this checkout and installed with ``--no-deps`` into a fresh venv
that reaches the dependencies through a ``.pth`` line naming this interpreter's
site-packages (the line only adds the folder: the ``.pth`` files there, this checkout's
editable install among them, are not processed, so ``import copyless`` is the wheel's).
About 30 s: one pip wheel, one pip install, one short ``spin`` run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from copyless.apps.bench import suites

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin/`` of a fresh venv holding copyless from a wheel of this checkout."""
    if not (ROOT / "pyproject.toml").is_file():
        pytest.skip("needs copyless's source checkout (to build the wheel)")
    base = tmp_path_factory.mktemp("installed")
    wheels, env_dir = base / "wheels", base / "venv"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          "-w", str(wheels), str(ROOT)], cwd=base)  # fmt: skip
    (wheel,) = wheels.glob("copyless-*.whl")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                      "['purelib'])"], cwd=base).strip())  # fmt: skip
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
          "--no-index", str(wheel)], cwd=base)  # fmt: skip
    where = _run([str(python), "-c", "import copyless; print(copyless.__file__)"], cwd=base)
    assert Path(where.strip()).is_relative_to(site), where  # the wheel's, not the checkout's
    return env_dir / "bin"


def _env() -> dict[str, str]:
    """This environment without what would point the child at this checkout."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    return done.stdout


def _bench(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / "copyless-bench"), *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip


def _hostile_folder(path: Path, marker: Path) -> Path:
    """A folder whose ``benchmarks/`` and ``copyless/`` write ``marker`` when run."""
    for relative in ("benchmarks/video.py", "benchmarks/spin.py", "benchmarks/peers.py",
                     "copyless/__init__.py", "numpy.py"):  # fmt: skip
        target = path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(HOSTILE.format(marker=str(marker)))
    (path / "benchmarks" / "__init__.py").write_text(HOSTILE.format(marker=str(marker)))
    return path


def test_help_and_list_from_any_folder(installed: Path, tmp_path: Path) -> None:
    result = _bench(installed, tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: copyless-bench" in result.stdout
    listed = _bench(installed, tmp_path, "--list")
    assert listed.returncode == 0, listed.stderr
    assert "peers" in listed.stdout and "spin" in listed.stdout
    assert "not installed with copyless" in listed.stdout  # the checkout's programs, named


def test_a_hostile_benchmarks_folder_in_the_cwd_is_never_run(
    installed: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    folder = _hostile_folder(tmp_path / "work", marker)
    refused = _bench(installed, folder, "video")
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()  # one line, no traceback
    assert "source checkout" in line and "benchmarks/video.py" in line
    listed = _bench(installed, folder, "--list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert str(folder) not in listed.stdout
    quick = _bench(installed, folder, "spin", "--frames", "1", "--rounds", "1", "--json")
    assert quick.returncode == 0, quick.stderr
    assert '"type": "summary"' in quick.stdout.splitlines()[-1]
    assert not marker.exists(), "a file of the working directory was run"


def test_checkout_programs_are_the_benchmarks_folder() -> None:
    """The names an installed copyless refuses are this checkout's programs, no more."""
    folder = ROOT / "benchmarks"
    if not folder.is_dir():
        pytest.skip("needs copyless's source checkout")
    found = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    assert list(suites.CHECKOUT_PROGRAMS) == found


def test_the_working_directory_is_no_checkout(tmp_path: Path, monkeypatch) -> None:
    """A ``benchmarks/`` in the working directory is not this copyless's checkout."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    fake = tmp_path / "site-packages" / "copyless" / "apps" / "bench" / "suites.py"
    assert suites.checkout_root(fake) is None  # an installed copyless
    inside = tmp_path / "src" / "copyless" / "apps" / "bench" / "suites.py"
    assert suites.checkout_root(inside) == tmp_path  # a checkout's own src/
