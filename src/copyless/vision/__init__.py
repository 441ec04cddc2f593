"""The vision layer: decode images, preprocess them into input tensors in one fused pass,
and read classification / text-detection outputs in place.

``decode`` -> ``classify_preprocess`` / ``letterbox`` / ``stretch`` (written straight into the
tensor's memory) -> run the model -> ``softmax_topk`` / ``text_boxes`` / ``detections`` ->
``draw_boxes`` / ``draw_detections``.
"""

from __future__ import annotations

from .decode import decode
from .detections import Detection, detections, draw_detections
from .formats import ColourFormat, Destination, colour_format_for
from .postprocess import Box, draw_boxes, softmax_topk, text_boxes
from .preprocess import Letterbox, classify_preprocess, letterbox, stretch

__all__ = [
    "Box",
    "ColourFormat",
    "Destination",
    "Detection",
    "Letterbox",
    "classify_preprocess",
    "colour_format_for",
    "decode",
    "detections",
    "draw_boxes",
    "draw_detections",
    "letterbox",
    "softmax_topk",
    "stretch",
    "text_boxes",
]
