"""copyless-bench: the benchmark suites installed with copyless, and the tooling they share.

``copyless-bench`` (or ``python -m copyless.apps.bench``) runs what ships in the wheel, the
suites of :mod:`.suites` (``peers``, ``prefix``, ``spin``); see :mod:`.cli`. The benchmark
programs of copyless's source checkout are not in the wheel: they run there as ``python
benchmarks/NAME.py`` and import the public pieces here. Modules: :mod:`.models` (model
variants, compiled and cached), :mod:`.tasks` (pre/postprocessing), :mod:`.peers`,
:mod:`.limits` and :mod:`.contenders` (the pipelines), :mod:`.gate` (correctness),
:mod:`.measure` (interleaved timing), :mod:`.timing` (interleaved timing of callables),
:mod:`.stages` (per-stage timing, also used by the apps), :mod:`.report` (tables, JSON, PNG).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``copyless-bench``; imported on call so that the apps can use :mod:`.stages` cheaply."""
    from .cli import main as run

    return run(argv)
