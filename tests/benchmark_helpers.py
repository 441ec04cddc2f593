"""The source checkout's benchmark programs run as their users run them: ``python
benchmarks/NAME.py ARGS``, a child of this interpreter that imports the copyless these tests
import, from any working directory. Imported by basename (this folder is on ``sys.path``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import copyless

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def programs() -> list[str]:
    """The name of every program in ``benchmarks/`` (``_*.py`` are their shared modules)."""
    return sorted(p.stem for p in BENCHMARKS.glob("*.py") if not p.stem.startswith("_"))


def run_program(
    name: str, *args: str, cwd: Path | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/NAME.py ARGS`` in ``cwd`` (default: the checkout's root); its
    output captured. ``PYTHONPATH`` gains the folder holding the imported copyless, so that
    the child imports it whatever ``cwd`` is (a relative ``PYTHONPATH=src`` would not)."""
    source = str(Path(copyless.__file__).resolve().parents[1])
    paths = [source, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    command = [sys.executable, str(BENCHMARKS / f"{name}.py"), *args]
    return subprocess.run(command, cwd=cwd or ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
