"""The benchmark programs' one home and one way to run them (issue 53): every
``benchmarks/NAME.py`` of the source checkout runs as ``python benchmarks/NAME.py ARGS``, from
any folder, and says so in its own usage; ``copyless-bench`` (the wheel's) runs none of them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmark_helpers import BENCHMARKS, ROOT, programs, run_program

#: What once launched a checkout program through the wheel: ``copyless-bench NAME`` (or
#: ``python -m copyless.apps.bench NAME``) for a name that is no suite of the wheel's.
LAUNCHED = re.compile(r"(copyless-bench|copyless\.apps\.bench) (?!peers\b|prefix\b|spin\b)[a-z]")


@pytest.mark.slow
@pytest.mark.parametrize("name", programs())
def test_every_program_answers_help_from_any_folder(name: str, tmp_path: Path) -> None:
    done = run_program(name, "--help", cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
    assert "copyless-bench" not in done.stdout  # its usage names the program, not a launcher
    assert not list(tmp_path.iterdir())  # --help wrote nothing


def test_a_program_runs_as_a_file(tmp_path: Path) -> None:
    done = run_program("layout", "--sizes", "8x8", "--repeats", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "8x8" in done.stdout


def test_no_program_tells_its_user_to_launch_it_through_copyless_bench() -> None:
    """The programs' docstrings and usage lines name ``python benchmarks/NAME.py``."""
    found = [f"{path.name}:{number}: {line.strip()}"
             for path in sorted(BENCHMARKS.iterdir()) if path.suffix in (".py", ".sh")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if LAUNCHED.search(line)]  # fmt: skip
    assert found == []


def test_the_docs_and_the_package_name_python_for_a_program() -> None:
    """README.md, docs/ and the package's docstrings name ``python benchmarks/NAME.py`` for a
    checkout program (the records under docs/benchmarks/data/ aside: JSON, kept as run)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "src" / "copyless").rglob("*.py"))]  # fmt: skip
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in pages
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if LAUNCHED.search(line)]  # fmt: skip
    assert found == []
