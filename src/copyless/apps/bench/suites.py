"""Every benchmark, run one way: ``copyless-bench NAME [ARGS...]``.

Two kinds of suites:

* built in (this package, installed with copyless, run from any folder): ``peers`` (the
  default: copyless against the pipelines users write, see :mod:`.cli`, which registers
  it: this module imports no suite, so nothing here imports back), ``prefix`` (the folded
  preprocessing per graph node, see :mod:`.prefix`) and ``spin`` (onnxruntime's thread
  spinning against the machine's load, see :mod:`.spin`);
* the benchmark programs of copyless's source checkout, one per hot path: every ``NAME.py``
  of :data:`CHECKOUT_PROGRAMS` in the ``benchmarks/`` folder of the checkout this copyless
  runs from (an editable install: ``benchmarks/`` beside the ``src/`` holding this
  package), run as its own ``__main__`` with ``ARGS`` as its command line. They build on
  this package's shared pieces (:mod:`.timing`, :mod:`.stages`, :mod:`.report`).

An installed wheel has no checkout: a checkout program's name is refused in one line
(``needs copyless's source checkout``). The working directory is never searched: a
``benchmarks/`` folder there (someone else's files) is never imported nor run. Only files
of the checkout that holds this very package are.

``copyless-bench --list`` prints them all.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

Suite = Callable[[Sequence[str]], int]

#: The checkout's benchmark programs (``benchmarks/NAME.py``), named here so that an
#: installed copyless can say what a name is instead of "no such benchmark"; a test keeps
#: the list equal to the folder.
CHECKOUT_PROGRAMS = (
    "accuracy",
    "bad_inputs",
    "bench_openvino",
    "cache_path",
    "detectors",
    "dynamic_outputs",
    "engine_choice",
    "first_submit",
    "fuzz_models",
    "gpu",
    "int8",
    "ipc_pipeline",
    "layout",
    "node_conformance",
    "ocr",
    "perf_analyzer",
    "pipeline",
    "preprocess",
    "ray_batch",
    "ray_guide",
    "ray_startup",
    "rotation",
    "runner",
    "serve",
    "serve_images",
    "serve_ocr",
    "serve_reload",
    "serving",
    "soak",
    "video",
    "video_batch",
    "yolo_video",
)


def builtin() -> dict[str, Suite]:
    """The suites installed with copyless besides ``peers`` (imported when run)."""

    def prefix(argv: Sequence[str]) -> int:
        from .prefix import main

        return main(argv)

    def spin(argv: Sequence[str]) -> int:
        from .spin import main

        return main(argv)

    return {"prefix": prefix, "spin": spin}


def checkout_root(package_file: Path | None = None) -> Path | None:
    """The source checkout this copyless runs from: the folder holding ``src/copyless``
    (this package) and a ``pyproject.toml`` and ``benchmarks/`` beside it; None for an
    installed copyless (site-packages has no ``src/`` above the package). Never the
    working directory."""
    here = (package_file or Path(__file__)).resolve()
    package = here.parents[2]  # .../copyless (this file: copyless/apps/bench/suites.py)
    source = package.parent
    if package.name != "copyless" or source.name != "src":
        return None
    root = source.parent
    if (root / "pyproject.toml").is_file() and (root / "benchmarks").is_dir():
        return root
    return None


def scripts_folder() -> Path | None:
    """The checkout's ``benchmarks/`` folder (:func:`checkout_root`), or None."""
    root = checkout_root()
    return None if root is None else root / "benchmarks"


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
        lines.append(f"  {name:<18}{first_line(module)}")
    found = scripts()
    where = scripts_folder()
    if where is None:
        lines.append("benchmark programs of copyless's source checkout (not installed with "
                     "copyless; run them from a checkout):")  # fmt: skip
        lines.extend(f"  {name}" for name in CHECKOUT_PROGRAMS)
        return lines
    lines.append(f"benchmark programs ({where}):")
    for name, path in found.items():
        lines.append(f"  {name:<18}{script_summary(path)}")
    return lines


def refusal(name: str) -> str | None:
    """The one line refusing a checkout program's ``name`` on an installed copyless, or
    None when ``name`` is no such program."""
    if name not in CHECKOUT_PROGRAMS:
        return None
    return (f"copyless-bench: error: {name!r} is a benchmark program of copyless's source "
            f"checkout (benchmarks/{name}.py), not installed with copyless: run it from a "
            "checkout (pip install -e .); built in: peers, prefix, spin")  # fmt: skip


def run_script(path: Path, argv: Sequence[str]) -> int:
    """Run benchmark program ``path`` as ``__main__`` with ``argv``; its exit status. A
    ``SystemExit`` carrying a message (``raise SystemExit("why")``) prints it on stderr and
    gives 1, as the interpreter does for ``python benchmarks/NAME.py``."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent))  # as ``python benchmarks/NAME.py`` would
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as stop:
        code = stop.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


def first_line(module: str) -> str:
    """The first docstring line of built-in suite ``module`` (``.prefix``)."""
    import importlib

    doc = importlib.import_module(module, __package__).__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def script_summary(path: Path) -> str:
    """The first docstring line of a program, read without running it."""
    import ast

    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError, ValueError):
        return "(unreadable)"
    return doc.strip().splitlines()[0] if doc.strip() else ""
