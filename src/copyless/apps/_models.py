"""The apps' built-in models: zoo models compiled with the RGBx input option, cached.

Each is compiled with its preprocessing recorded (mean/std folded into the graph, RGB, the
resize policy: torchvision's crop for the classifiers, a 114-grey letterbox for the
detector), so the apps prepare photos from the record. The compiled artifact is cached
beside the zoo's ONNX file, keyed by that file's name (which carries the source package and
builder versions) and the compile options.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..model import compile_model, zoo
from ..model.compiler import artifact_key

logger = logging.getLogger(__name__)

CLASSIFIER = "efficientnet-lite0"
DETECTOR = "ppocr-det"
DETECTOR_SIZE = 640
#: Models the zoo holds with dynamic H, W, and the square size the apps compile them at.
_FIXED_SIZE = {DETECTOR: DETECTOR_SIZE}


def recorded_preprocessing(name: str) -> dict[str, Any]:
    """The compile options that record zoo model ``name``'s preprocessing: mean/std, RGB,
    and its resize policy (a crop of ``size / resize`` for classifiers, a letterbox for
    models the zoo resizes straight to size)."""
    prep = zoo.preprocessing(name)
    crop = None if prep.resize is None else prep.size[0] / prep.resize
    resize = "letterbox:114" if crop is None else f"crop:{crop:g}"
    return {"mean": tuple(prep.mean), "std": tuple(prep.std), "colour_order": "rgb",
            "resize": resize}  # fmt: skip


def builtin_model(name: str, *, progress: bool = True, **extra: Any) -> Path:
    """Compile zoo model ``name`` with its normalisation folded into an RGBx uint8 input."""
    source = zoo.build(name, progress=progress)
    options: dict[str, Any] = {"input_format": "rgbx", **recorded_preprocessing(name)}
    if name in _FIXED_SIZE:
        side = _FIXED_SIZE[name]
        options["input_shapes"] = {"x": (1, 3, side, side)}
    options.update(extra)
    key = artifact_key(source.name, options)
    target = zoo.cache_root() / "compiled" / f"{name}-{options['input_format']}-{key}.rai"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp.rai")
    logger.info("compiling %s for %s input -> %s", name, options["input_format"], target)
    compile_model(source, tmp, **options)
    os.replace(tmp, target)
    return target


def builtin_classifier(progress: bool = True) -> Path:
    return builtin_model(CLASSIFIER, progress=progress)


def builtin_detector(progress: bool = True) -> Path:
    return builtin_model(DETECTOR, progress=progress)
