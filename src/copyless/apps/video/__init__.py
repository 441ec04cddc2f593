"""copyless-video: classify (or detect in) every frame of one or many videos, the decoders'
planes bound to one model; ``copyless-video`` or ``python -m copyless.apps.video``.

Modules: :mod:`._cli` (the arguments, opening the streams and the model), :mod:`._inputs`
(the model for the streams, their inputs, the frame writers), :mod:`._tasks` (each model's
answer per frame), :mod:`._run` (the pipeline's ``prepare``/``finish``, each result shown,
the closing block), :mod:`._figures` (a stream's figures and what they mean),
:mod:`._metrics` (the one Prometheus collector, for ``--metrics-port`` and the page),
:mod:`._board`, :mod:`._page` and :mod:`._live` (``--serve``'s live page).
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``copyless-video``; imported on call, so that importing the package (the page's
    modules, the tests') does not load the app."""
    from ._cli import main as run

    return run(argv)
