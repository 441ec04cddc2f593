"""The vision layer: decode images, preprocess them into input tensors in one fused pass,
and read classification / text-detection outputs in place.

``decode`` -> ``classify_preprocess`` / ``letterbox`` / ``stretch`` (written straight into the
tensor's memory) -> run the model -> ``softmax_topk`` / ``text_boxes`` / ``detections`` ->
``draw_boxes`` / ``draw_detections``.
Video (``copyless[video]``, PyAV imported on first use): ``VideoSource`` yields the
decoder's I420/NV12 planes for models compiled with ``input_format="i420" | "nv12"``;
``VideoWriter`` encodes annotated frames; ``StreamSet`` decodes many streams side by side
and assembles their frames into batches for one model, with per-stream ``StreamStats`` and
the latest ``Annotated`` frame of each stream (for a dashboard or a web page).
"""

from __future__ import annotations

from ._decode import decode
from ._detections import Detection, detections, draw_detections
from ._formats import ColourFormat, Destination, colour_format_for
from ._postprocess import Box, draw_boxes, softmax_topk, text_boxes
from ._preprocess import Letterbox, classify_preprocess, letterbox, stretch
from ._streams import Annotated, StreamFrame, StreamSet, StreamStats
from ._video import StreamInfo, VideoError, VideoFrame, VideoSource
from ._video_writer import VideoWriter

__all__ = [
    "Annotated",
    "Box",
    "ColourFormat",
    "Destination",
    "Detection",
    "Letterbox",
    "StreamFrame",
    "StreamInfo",
    "StreamSet",
    "StreamStats",
    "VideoError",
    "VideoFrame",
    "VideoSource",
    "VideoWriter",
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
