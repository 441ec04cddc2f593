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

from ._models import CLASSIFIER, builtin_model, builtin_object_detector
from .video import stream_model, video_engine

__all__ = ["CLASSIFIER", "builtin_model", "builtin_object_detector", "stream_model",
           "video_engine"]  # fmt: skip
