"""The suites of ``copyless-bench``: what ships in the wheel is what it runs.

Three suites, installed with copyless and run from any folder: ``peers`` (the default:
copyless against the pipelines users write, see :mod:`.cli`, which registers it: this
module imports no suite, so nothing here imports back), ``prefix`` (the folded
preprocessing per graph node, see :mod:`.prefix`) and ``spin`` (onnxruntime's thread
spinning against the machine's load, see :mod:`.spin`). ``copyless-bench --list`` names
them.

The benchmark programs of copyless's source checkout (``benchmarks/NAME.py``, one per hot
path) are not in the wheel, and ``copyless-bench`` neither finds, lists nor runs them: they
run in a checkout as ``python benchmarks/NAME.py ARGS``, as Ray keeps ``release/`` outside
``python/ray``. They build on this package's public pieces (:mod:`.timing`, :mod:`.stages`,
:mod:`.report`). A name that is no suite is refused in one line (:func:`unknown`), which
points a name that could be such a program at its command.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence

Suite = Callable[[Sequence[str]], int]

#: Every suite, in ``--list``'s order; ``peers`` first (the default).
NAMES = ("peers", "prefix", "spin")
#: A name that could be a checkout program's (``benchmarks/NAME.py``): a file name's stem.
_PROGRAM_NAME = re.compile(r"[a-z][a-z0-9_]*")


def builtin() -> dict[str, Suite]:
    """The suites besides ``peers`` (each imported when run)."""

    def prefix(argv: Sequence[str]) -> int:
        from .prefix import main

        return main(argv)

    def spin(argv: Sequence[str]) -> int:
        from .spin import main

        return main(argv)

    return {"prefix": prefix, "spin": spin}


def first_line(module: str) -> str:
    """The first docstring line of suite ``module`` (``.prefix``)."""
    doc = importlib.import_module(module, __package__).__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def unknown(name: str) -> str:
    """The one line refusing ``name``, no suite: it names the suites and, for a name that
    could be a program of copyless's source checkout, the command that runs it there."""
    line = f"copyless-bench: error: no suite {name!r} (the suites: {', '.join(NAMES)})"
    if _PROGRAM_NAME.fullmatch(name) is None:
        return line
    return (f"{line}; if benchmarks/{name}.py is a program of copyless's source checkout, "
            f"run it there with python benchmarks/{name}.py")  # fmt: skip
