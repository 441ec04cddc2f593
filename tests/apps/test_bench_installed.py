"""copyless-bench from an installed wheel (not an editable checkout): it runs from any folder,
offers its three suites and nothing else, refuses any other name in one line, and never
imports or runs a ``benchmarks/`` (or ``copyless/``) it finds in the working directory. The
wheel holds no launcher of the source checkout's ``benchmarks/`` (issue 53: what ships in the
wheel is what users run).

The wheel is built from this checkout and installed with ``--no-deps`` into a fresh venv
that reaches the dependencies through a ``.pth`` line naming this interpreter's
site-packages (the line only adds the folder: the ``.pth`` files there, this checkout's
editable install among them, are not processed, so ``import copyless`` is the wheel's).
About 30 s: one pip wheel, one pip install, one short ``spin`` run.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of this checkout."""
    if not (ROOT / "pyproject.toml").is_file():
        pytest.skip("needs copyless's source checkout (to build the wheel)")
    wheels = tmp_path_factory.mktemp("wheels")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          "-w", str(wheels), str(ROOT)], cwd=wheels)  # fmt: skip
    (built,) = wheels.glob("copyless-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """The ``bin/`` of a fresh venv holding copyless from a wheel of this checkout."""
    base = tmp_path_factory.mktemp("installed")
    env_dir = base / "venv"
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
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert names == ["peers", "prefix", "spin"]  # what ships, nothing of a checkout


def test_a_hostile_benchmarks_folder_in_the_cwd_is_never_run(
    installed: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    folder = _hostile_folder(tmp_path / "work", marker)
    refused = _bench(installed, folder, "video")
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()  # one line, no traceback
    assert "source checkout" in line and line.endswith("with python benchmarks/video.py")
    listed = _bench(installed, folder, "--list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert str(folder) not in listed.stdout and '"suites": 3' in listed.stdout
    quick = _bench(installed, folder, "spin", "--frames", "1", "--rounds", "1", "--json")
    assert quick.returncode == 0, quick.stderr
    assert '"type": "summary"' in quick.stdout.splitlines()[-1]
    assert not marker.exists(), "a file of the working directory was run"


def test_the_wheel_holds_no_launcher_of_the_checkouts_programs(wheel: Path) -> None:
    """No file of ``benchmarks/`` is in the wheel, and no module of it runs a file by path
    (``runpy``, ``exec``) or names the ``benchmarks`` folder in its code (messages aside)."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        sources = {n: archive.read(n).decode() for n in names if n.endswith(".py")}
    assert not [n for n in names if n.startswith("benchmarks/") or "/benchmarks/" in n]
    assert "copyless/apps/bench/cli.py" in sources  # the wheel's copyless-bench
    found = [f"{name}:{line}: {what}" for name, source in sorted(sources.items())
             for line, what in _launches(source)]  # fmt: skip
    assert found == []


def _launches(source: str) -> list[tuple[int, str]]:
    """Where ``source`` could run another file: an import of ``runpy``, a call of ``exec``
    or ``runpy.run_path``, a string that is the ``benchmarks`` folder (``root /
    "benchmarks"``, ``"benchmarks/*.py"``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if "runpy" in modules:
                found.append((node.lineno, "imports runpy"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("exec", "execfile"):
                found.append((node.lineno, f"calls {node.func.id}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            folder = node.value.strip("/") == "benchmarks" or node.value.startswith("benchmarks/*")
            if folder:
                found.append((node.lineno, repr(node.value)))
    return found


def test_the_launch_check_sees_a_launcher() -> None:
    """What the wheel held before issue 53 (``suites.run_script``) is caught."""
    launcher = ("import runpy\nfrom pathlib import Path\n"
                "def scripts(root: Path) -> list[Path]:\n"
                "    return sorted((root / 'benchmarks').glob('*.py'))\n"
                "def run(path: Path) -> None:\n"
                "    runpy.run_path(str(path), run_name='__main__')\n")  # fmt: skip
    assert [line for line, _ in _launches(launcher)] == [1, 4]
    message = "print(f'run it there with python benchmarks/{name}.py')\n"
    assert _launches(message) == []
