"""Every benchmark, run one way: ``copyless-bench NAME [ARGS...]``.

Two kinds of suites:

* built in (this package, installed with copyless): ``peers`` (the default: copyless
  against the pipelines users write, see :mod:`.cli`, which registers it: this module
  imports no suite, so nothing here imports back), ``prefix`` (the folded
  preprocessing per graph node, see :mod:`.prefix`) and ``spin`` (onnxruntime's thread
  spinning against the machine's load, see :mod:`.spin`);
* the benchmark programs of a source checkout, one per hot path: every ``NAME.py`` in its
  ``benchmarks/`` folder (the repository root's, found beside ``src/``, or ``./benchmarks``),
  run as its own ``__main__`` with ``ARGS`` as its command line. They build on this
  package's shared pieces (:mod:`.timing`, :mod:`.stages`, :mod:`.report`).

``copyless-bench --list`` prints them all.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

Suite = Callable[[Sequence[str]], int]


def builtin() -> dict[str, Suite]:
    """The suites installed with copyless besides ``peers`` (imported when run)."""

    def prefix(argv: Sequence[str]) -> int:
        from .prefix import main

        return main(argv)

    def spin(argv: Sequence[str]) -> int:
        from .spin import main

        return main(argv)

    return {"prefix": prefix, "spin": spin}


def scripts_folder() -> Path | None:
    """The checkout's ``benchmarks/`` folder: beside ``src/`` of this copyless, else in the
    working directory; None when neither exists (an installed copyless)."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[4] / "benchmarks", Path.cwd() / "benchmarks"):
        if candidate.is_dir():
            return candidate
    return None


def scripts() -> dict[str, Path]:
    """``NAME -> path`` of every benchmark program in :func:`scripts_folder`."""
    folder = scripts_folder()
    if folder is None:
        return {}
    return {p.stem: p for p in sorted(folder.glob("*.py")) if not p.stem.startswith("_")}


def describe(peers: str) -> list[str]:
    """One line per suite: its name and the first line of its docstring (``peers``: the
    peers suite's, which its module passes in)."""
    lines = ["built in:", f"  {'peers':<18}{peers}"]
    for name, module in (("prefix", ".prefix"), ("spin", ".spin")):
        lines.append(f"  {name:<18}{_first_line(module)}")
    found = scripts()
    where = scripts_folder()
    lines.append(f"benchmark programs ({where or 'no benchmarks/ folder: an installed copyless'}):")
    for name, path in found.items():
        lines.append(f"  {name:<18}{_script_summary(path)}")
    return lines


def run_script(path: Path, argv: Sequence[str]) -> int:
    """Run benchmark program ``path`` as ``__main__`` with ``argv``; its exit status."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent))  # as ``python benchmarks/NAME.py`` would
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as stop:
        code = stop.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


def _first_line(module: str) -> str:
    import importlib

    doc = importlib.import_module(module, __package__).__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _script_summary(path: Path) -> str:
    """The first docstring line of a program, read without running it."""
    import ast

    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError, ValueError):
        return "(unreadable)"
    return doc.strip().splitlines()[0] if doc.strip() else ""
