"""The PP-OCRv4 text detector shipped in ``rapidocr-onnxruntime`` (no rebuild, a checked copy).

Model: input ``x`` float32 ``[N, 3, H, W]`` RGB NCHW, all dimensions dynamic (H and W multiples
of 32), output ``sigmoid_0.tmp_0`` float32 ``[N, 1, H, W]``: the per-pixel text probability
(threshold around 0.3, then boxes from connected regions, as in PP-OCR's DB post-processing).
Preprocessing: ImageNet mean/std on 0..1 RGB, i.e. ``(pixel - 255 * mean) / (255 * std)``.

The file is found without importing ``rapidocr_onnxruntime`` (which would import OpenCV). Its
opset is 12 and its IR version 8, which onnxruntime loads; a newer IR version than copyless's
onnxruntime accepts would be lowered to 10 here.
"""

from __future__ import annotations

from collections.abc import Callable

from ._shipped import shipped_model

__all__ = ["BUILD_STEPS", "MODEL_FILE", "PACKAGE", "build"]

PACKAGE = "rapidocr_onnxruntime"
MODEL_FILE = "models/ch_PP-OCRv4_det_infer.onnx"
BUILD_STEPS = 2

Tick = Callable[[int], None]


def build(tick: Tick | None = None) -> bytes:
    """Return the detector's ONNX bytes, IR version lowered to 10 only where it is higher.

    Copies: the file is read once; it is re-serialized only when its IR version changes.
    """
    return shipped_model(PACKAGE, MODEL_FILE, tick)
