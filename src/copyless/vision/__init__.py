"""The vision layer: decode images, preprocess them into input tensors in one fused pass,
and read classification / text-detection outputs in place.

``decode`` -> ``classify_preprocess`` / ``letterbox`` / ``stretch`` (written straight into the
tensor's memory) -> run the model -> ``softmax_topk`` / ``text_boxes`` / ``detections`` ->
``draw_boxes`` / ``draw_detections`` (format by extension). Detections come back in the
model's frame pixels; ``to_image`` maps them to the photo through what ``stretch`` or
``letterbox`` returned, and ``limit_side`` is the size policy the apps feed detectors at.
Video (``copyless[video]``, PyAV imported on first use): ``VideoSource`` yields the
decoder's I420/NV12 planes for models compiled with ``input_format="i420" | "nv12"``;
``VideoWriter`` encodes annotated frames.
"""

from __future__ import annotations

from ._decode import ImageSource, decode
from ._detections import Detection, Placement, detections, draw_detections, to_image
from ._formats import ColourFormat, Destination, colour_format_for
from ._gpu import DeviceImage, download, upload
from ._postprocess import IMAGE_FORMATS, Box, draw_boxes, image_format, softmax_topk, text_boxes
from ._preprocess import Letterbox, classify_preprocess, letterbox, limit_side, stretch
from ._video import StreamInfo, VideoError, VideoFrame, VideoSource, import_av
from ._video_writer import VideoWriter

__all__ = [
    "IMAGE_FORMATS",
    "Box",
    "ColourFormat",
    "Destination",
    "Detection",
    "DeviceImage",
    "ImageSource",
    "Letterbox",
    "Placement",
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
    "image_format",
    "import_av",
    "letterbox",
    "limit_side",
    "softmax_topk",
    "stretch",
    "text_boxes",
    "to_image",
    "upload",
]
