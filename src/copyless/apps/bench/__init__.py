"""copyless-bench: every benchmark of copyless, in one package, run one way.

``copyless-bench`` (or ``python -m copyless.apps.bench``); see :mod:`.cli`. Modules:
:mod:`.models` (model variants, compiled and cached), :mod:`.tasks` (pre/postprocessing),
:mod:`.peers`, :mod:`.limits` and :mod:`.contenders` (the pipelines), :mod:`.gate`
(correctness), :mod:`.measure` (interleaved timing), :mod:`.stages` (per-stage timing, also
used by the apps), :mod:`.report` (tables, JSON, PNG).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``copyless-bench``; imported on call so that the apps can use :mod:`.stages` cheaply."""
    from .cli import main as run

    return run(argv)
