"""The apps' built-in models, as a script or a benchmark reaches them without the apps'
private modules: the zoo's models compiled the way the apps compile them, cached in the
zoo's one locked cache.

* :func:`builtin_model` (``CLASSIFIER``: EfficientNet-Lite0) for RGBx uint8 images with its
  preprocessing recorded (what copyless-classify, copyless-batch and copyless-serve's
  built-in model run);
* :func:`builtin_object_detector` a zoo detector for frames of a size, its decoding and NMS
  folded in (copyless-detect ``-m face|layout``);
* :func:`stream_model` a zoo model compiled for a video stream's planes (copyless-video's
  built-in models);
* :func:`video_engine` the runner options and type copyless-video opens its model with.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..types import RunnerType
from ..vision import StreamInfo
from ._models import CLASSIFIER, builtin_model, builtin_object_detector
from ._setup import runner_type
from .video._inputs import engine_options
from .video._tasks import builtin_for

__all__ = ["CLASSIFIER", "builtin_model", "builtin_object_detector", "stream_model",
           "video_engine"]  # fmt: skip


def stream_model(name: str, info: StreamInfo, line_sizes: tuple[int, int] | None = None,
                 batch: int = 1) -> Path:  # fmt: skip
    """Zoo model ``name`` compiled for ``info``'s planes, size and colours, ``batch``
    frames a run, as copyless-video compiles it (with the decoder's ``line_sizes`` when its
    lines are padded)."""
    return builtin_for(name, info, line_sizes, batch)


def video_engine(runner: str = "vaiml", slots: int = 2,
                 device: str = "cpu") -> tuple[dict[str, Any], RunnerType]:  # fmt: skip
    """The runner options and type copyless-video opens its model with for ``--runner``,
    ``--slots`` and ``--device``."""
    app = argparse.Namespace(runner=runner, device=device, slots=slots)
    return engine_options(app), runner_type(app)
