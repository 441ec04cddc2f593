"""The vision layer: decode images, preprocess them into input tensors in one fused pass,
and read classification / text-detection outputs in place.

``decode`` -> ``classify_preprocess`` / ``letterbox`` (written straight into the tensor's
memory) -> run the model -> ``softmax_topk`` / ``text_boxes`` -> ``draw_boxes``.
"""

from __future__ import annotations

from .decode import decode
from .formats import ColourFormat, Destination, colour_format_for
from .postprocess import Box, draw_boxes, softmax_topk, text_boxes
from .preprocess import Letterbox, classify_preprocess, letterbox, stretch

__all__ = [
    "Box",
    "ColourFormat",
    "Destination",
    "Letterbox",
    "classify_preprocess",
    "colour_format_for",
    "decode",
    "draw_boxes",
    "letterbox",
    "softmax_topk",
    "stretch",
    "text_boxes",
]
