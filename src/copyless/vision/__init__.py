"""The vision layer: decode images, preprocess them into input tensors in one fused pass,
and read classification / text-detection outputs in place.

``decode`` (the one image reader: files, bytes, PIL images and arrays, upright, 16-bit and
float samples scaled; ``image_files`` lists a folder's images by the apps' one rule) ->
``classify_preprocess`` / ``letterbox`` / ``stretch`` (written straight into the
tensor's memory) -> run the model -> ``softmax_topk`` / ``text_boxes`` / ``detections`` ->
``draw_boxes`` / ``draw_detections`` (format by extension); a segmenter's output:
``class_mask`` -> ``mask_to_image`` -> ``mask_summary`` / ``draw_mask``. Detections come back in the
model's frame pixels; ``to_image`` maps them to the photo through what ``stretch`` or
``letterbox`` returned, and ``limit_side`` is the size policy the apps feed detectors at.
``preparer_for`` reads a compiled model's preprocessing record and returns the ``Preparer``
that decodes a photo and writes it into the model's input as the model was compiled to see
it (crop, letterbox or stretch; colour order; host normalisation).
Text lines (OCR): ``text_quads`` (DB postprocess) -> ``line_crops`` -> ``warp_lines`` (crops
sampled straight into a recogniser's batch tensor).
Video (``copyless[video]``, PyAV imported on first use): ``VideoSource`` yields the
decoder's I420/NV12 planes for models compiled with ``input_format="i420" | "nv12"``;
``VideoWriter`` encodes annotated frames; ``StreamSet`` decodes many streams side by side
(each stream's frames a source of ``Pipeline.map_sources``, or batches it assembles), with
per-stream ``StreamStats`` and the latest ``Annotated`` frame of each stream (for a
dashboard or a web page).
"""

from __future__ import annotations

from ._decode import (
    DECODE_HEADROOM,
    AnyImage,
    ImageSource,
    ImageTooLargeError,
    ReadLimit,
    decode,
    image_size,
)
from ._detections import Detection, Placement, detections, draw_detections, to_image
from ._extra import need
from ._formats import ColourFormat, Destination, colour_format_for
from ._frames import classify_frame, swscale_coefficients
from ._gpu import DeviceImage, download, upload
from ._image_files import IMAGE_SUFFIXES, ImageFiles, image_files
from ._masks import OUTSIDE, MaskClass, class_mask, draw_mask, mask_summary, mask_to_image
from ._postprocess import IMAGE_FORMATS, Box, draw_boxes, image_format, softmax_topk, text_boxes
from ._prepare import DEFAULT_ORDER, DEFAULT_RESIZE, Preparer, preparer_for
from ._preprocess import Letterbox, classify_preprocess, letterbox, limit_side, stretch
from ._streams import Annotated, StreamFrame, StreamSet, StreamStats
from ._textlines import LineCrops, line_crops, order_lines, place_page, text_quads, warp_lines
from ._video import StreamInfo, VideoError, VideoFrame, VideoSource, import_av, plane_array
from ._video_writer import VideoWriter

__all__ = [
    "DECODE_HEADROOM",
    "DEFAULT_ORDER",
    "DEFAULT_RESIZE",
    "IMAGE_FORMATS",
    "IMAGE_SUFFIXES",
    "OUTSIDE",
    "Annotated",
    "AnyImage",
    "Box",
    "ColourFormat",
    "Destination",
    "Detection",
    "DeviceImage",
    "ImageFiles",
    "ImageSource",
    "ImageTooLargeError",
    "Letterbox",
    "LineCrops",
    "MaskClass",
    "Placement",
    "Preparer",
    "ReadLimit",
    "StreamFrame",
    "StreamInfo",
    "StreamSet",
    "StreamStats",
    "VideoError",
    "VideoFrame",
    "VideoSource",
    "VideoWriter",
    "class_mask",
    "classify_frame",
    "classify_preprocess",
    "colour_format_for",
    "decode",
    "preparer_for",
    "detections",
    "download",
    "draw_boxes",
    "draw_detections",
    "draw_mask",
    "image_files",
    "image_format",
    "image_size",
    "import_av",
    "letterbox",
    "limit_side",
    "need",
    "line_crops",
    "mask_summary",
    "mask_to_image",
    "order_lines",
    "place_page",
    "softmax_topk",
    "stretch",
    "swscale_coefficients",
    "text_boxes",
    "text_quads",
    "to_image",
    "upload",
    "warp_lines",
    "plane_array",
]
