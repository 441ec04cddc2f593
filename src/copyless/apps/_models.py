"""The apps' built-in models: zoo models compiled with the RGBx input option, cached.

The compiled artifact is cached beside the zoo's ONNX file, keyed by that file's name (which
carries the source package and builder versions) and the compile options.
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


def builtin_model(name: str, *, progress: bool = True, **extra: Any) -> Path:
    """Compile zoo model ``name`` with its normalisation folded into an RGBx uint8 input."""
    source = zoo.build(name, progress=progress)
    prep = zoo.preprocessing(name)
    options: dict[str, Any] = {
        "input_format": "rgbx",
        "mean": tuple(prep.mean),
        "std": tuple(prep.std),
        **extra,
    }
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
    size = DETECTOR_SIZE
    return builtin_model(DETECTOR, progress=progress, input_shapes={"x": (1, 3, size, size)})
