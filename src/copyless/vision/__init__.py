"""The vision layer: decode images, preprocess them into input tensors in one fused pass,
and read classification / text-detection outputs in place.

``decode`` -> ``classify_preprocess`` / ``letterbox`` / ``stretch`` (written straight into the
tensor's memory) -> run the model -> ``softmax_topk`` / ``text_boxes`` / ``detections`` ->
``draw_boxes`` / ``draw_detections``.
Video (``copyless[video]``, PyAV imported on first use): ``VideoSource`` yields the
decoder's I420/NV12 planes for models compiled with ``input_format="i420" | "nv12"``;
``VideoWriter`` encodes annotated frames.
"""

from __future__ import annotations

from ._decode import ImageSource, decode
from ._detections import Detection, detections, draw_detections
from ._formats import ColourFormat, Destination, colour_format_for
from ._gpu import DeviceImage, download, upload
from ._postprocess import Box, draw_boxes, softmax_topk, text_boxes
from ._preprocess import Letterbox, classify_preprocess, letterbox, stretch
from ._video import StreamInfo, VideoError, VideoFrame, VideoSource, import_av
from ._video_writer import VideoWriter

__all__ = [
    "Box",
    "ColourFormat",
    "Destination",
    "Detection",
    "DeviceImage",
    "ImageSource",
    "Letterbox",
    "StreamInfo",
    "VideoError",
    "VideoFrame",
    "VideoSource",
    "VideoWriter",
    "classify_preprocess",
    "colour_format_for",
    "decode",
    "detections",
    "download",
    "draw_boxes",
    "draw_detections",
    "import_av",
    "letterbox",
    "softmax_topk",
    "stretch",
    "text_boxes",
    "upload",
]
