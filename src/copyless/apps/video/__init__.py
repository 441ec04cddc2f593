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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from ...types import RunnerType
    from ...vision import StreamInfo

__all__ = ["main", "stream_model", "video_engine"]


def main(argv: list[str] | None = None) -> int:
    """``copyless-video``; imported on call, so that importing the package (the page's
    modules, the tests') does not load the app."""
    from ._cli import main as run

    return run(argv)


def stream_model(name: str, info: StreamInfo, line_sizes: tuple[int, int] | None = None,
                 batch: int = 1) -> Path:  # fmt: skip
    """Zoo model ``name`` compiled for ``info``'s planes, size and colours, ``batch``
    frames a run, as copyless-video compiles its built-in models (with the decoder's
    ``line_sizes`` when its lines are padded); cached."""
    from ._tasks import builtin_for

    return builtin_for(name, info, line_sizes, batch)


def video_engine(runner: str = "vaiml", slots: int = 2,
                 device: str = "cpu") -> tuple[dict[str, Any], RunnerType]:  # fmt: skip
    """The runner options and type copyless-video opens its model with for ``--runner``,
    ``--slots`` and ``--device``."""
    import argparse

    from .._setup import runner_type
    from ._inputs import engine_options

    app = argparse.Namespace(runner=runner, device=device, slots=slots)
    return engine_options(app), runner_type(app)
