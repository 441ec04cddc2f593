"""Per-task pieces every pipeline shares: the users' numpy/PIL pre- and postprocessing,
OpenVINO's PrePostProcessor steps, and copyless's fused vision calls.

A frame's result is an :class:`Outcome`: the top-5 class ids of a classifier, or the text
boxes (source-image pixels, axis aligned) of the detector.

Plain preprocessing follows what users write: PIL ``resize`` (bilinear) + centre crop for a
classifier, PIL resize + paste into a grey 640x640 canvas (letterbox) for the detector, then
``np.asarray(float32)``, ``(x - mean) / std``, transpose to CHW. The detector's plain
postprocess is rapidocr's own ``DBPostProcess`` (OpenCV contours + pyclipper unclip) when it
imports, else connected components with :mod:`scipy.ndimage`.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from ...memory import NpuTensor
from ...model import zoo
from ...types import QuantParameters
from ...vision import softmax_topk, text_boxes
from .models import ModelSpec

logger = logging.getLogger(__name__)

BoxTuple = tuple[float, float, float, float]
FILL = 114  # letterbox border, pixel units
THRESHOLD, BOX_THRESHOLD = 0.3, 0.5  # DB pixel and box score cuts, as rapidocr


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one frame produced: class ids best first, or text boxes (x0, y0, x1, y1)."""

    classes: tuple[int, ...] = ()
    boxes: tuple[BoxTuple, ...] = ()

    def describe(self) -> str:
        if self.classes:
            return f"top-5 {list(self.classes)}"
        return f"{len(self.boxes)} boxes"


@dataclass(frozen=True, slots=True)
class Photo:
    """The benchmark's photo: its file bytes and, decoded once, its pixels.

    With ``per_frame`` every frame decodes the bytes again (a pipeline that starts from JPEG
    files); else every frame reuses the decoded pixels (the VART-ML samples' convention).
    The users' pipelines decode with Pillow; copyless with :mod:`copyless.vision` (see the
    contenders).
    """

    data: bytes
    pixels: npt.NDArray[np.uint8]
    image: Image.Image
    per_frame: bool

    def pil(self) -> Image.Image:
        """A decoded Pillow image: ``Image.open(...).convert("RGB")``, as users write it."""
        if not self.per_frame:
            return self.image
        with Image.open(io.BytesIO(self.data)) as opened:
            return opened.convert("RGB")

    def array(self) -> npt.NDArray[np.uint8]:
        """Decoded ``(H, W, 3)`` uint8 pixels, with Pillow (one more copy, out of Pillow)."""
        if not self.per_frame:
            return self.pixels
        return np.asarray(self.pil())


@dataclass(frozen=True, slots=True)
class Geometry:
    """Where the photo lands in the model input: resize to (new_h, new_w), then either a
    crop at (top, left) (classifier) or padding at (top, left) (detector letterbox)."""

    new_h: int
    new_w: int
    top: int
    left: int
    size: int
    letterbox: bool
    width: int
    height: int


def geometry(spec: ModelSpec, height: int, width: int) -> Geometry:
    """The same geometry copyless.vision uses (torchvision Resize+CenterCrop / letterbox)."""
    size = spec.size
    if spec.task == "detect":
        scale = size / max(height, width)
        new_w = min(size, max(1, round(width * scale)))
        new_h = min(size, max(1, round(height * scale)))
        return Geometry(new_h, new_w, (size - new_h) // 2, (size - new_w) // 2, size, True,
                        width, height)  # fmt: skip
    short = round(size * 256 / 224)
    if width <= height:
        new_w, new_h = short, int(short * height / width)
    else:
        new_w, new_h = int(short * width / height), short
    top, left = round((new_h - size) / 2.0), round((new_w - size) / 2.0)
    return Geometry(new_h, new_w, top, left, size, False, width, height)


class Task:
    """The pre/postprocessing of one model for every pipeline family."""

    def __init__(self, spec: ModelSpec, height: int, width: int) -> None:
        prep = zoo.preprocessing(spec.name)
        self.spec = spec
        self.geo = geometry(spec, height, width)
        self.mean = np.asarray(prep.mean, np.float32)
        self.inv_std = np.asarray(prep.scale, np.float32)
        self.std = np.asarray(prep.std, np.float32)
        self._db = _db_postprocess() if spec.task == "detect" else _no_boxes

    # -- plain: PIL + numpy ------------------------------------------------------------
    def plain_pixels(self, image: Image.Image) -> Image.Image:
        """PIL resize (bilinear, antialiased) and centre crop / letterbox: a new image."""
        g = self.geo
        resized = image.resize((g.new_w, g.new_h), Image.Resampling.BILINEAR)
        if g.letterbox:
            canvas = Image.new("RGB", (g.size, g.size), (FILL, FILL, FILL))
            canvas.paste(resized, (g.left, g.top))
            return canvas
        return resized.crop((g.left, g.top, g.left + g.size, g.top + g.size))

    def plain_preprocess(self, image: Image.Image) -> npt.NDArray[np.float32]:
        """What users write: float32 array, normalise, HWC -> CHW, contiguous (copies)."""
        x = np.asarray(self.plain_pixels(image), dtype=np.float32)
        x = (x - self.mean) / self.std
        return np.ascontiguousarray(x.transpose(2, 0, 1))

    def into(self, image: Image.Image, out: npt.NDArray[np.float32],
             scratch: npt.NDArray[np.float32]) -> None:  # fmt: skip
        """IOBinding style: normalise into ``scratch`` (HWC) and write CHW into ``out``."""
        pixels = np.asarray(self.plain_pixels(image))
        np.subtract(pixels, self.mean, out=scratch)
        np.multiply(scratch, self.inv_std, out=scratch)
        np.copyto(out, scratch.transpose(2, 0, 1))

    def postprocess(self, row: npt.NDArray[Any]) -> Outcome:
        """Numpy postprocess of one frame's output (logits ``[1000]`` or map ``[1, H, W]``)."""
        if self.spec.task == "detect":
            plane = np.asarray(row, np.float32).reshape(row.shape[-2:])
            boxes = (self._canvas_to_source(box) for box in self._db(plane))
            return Outcome(boxes=tuple(b for b in boxes if b is not None))
        logits = np.asarray(row, np.float32).reshape(-1)
        exp = np.exp(logits - logits.max())
        probs = exp / exp.sum()
        return Outcome(classes=tuple(int(i) for i in np.argsort(-probs, kind="stable")[:5]))

    def _canvas_to_source(self, box: BoxTuple) -> BoxTuple | None:
        g = self.geo
        scale = g.new_w / g.width
        x0 = max(0.0, (box[0] - g.left) / scale)
        y0 = max(0.0, (box[1] - g.top) / scale)
        x1 = min(float(g.width), (box[2] - g.left) / scale)
        y1 = min(float(g.height), (box[3] - g.top) / scale)
        return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None

    # -- copyless: read out of the runner's tensors (frames go in with apps/_prepare) ---
    def copyless_postprocess(self, tensor: NpuTensor, quant: QuantParameters | None,
                             placement: Any, batch_index: int) -> Outcome:  # fmt: skip
        """Top-5 / text boxes read in place (see copyless.vision)."""
        if self.spec.task == "detect":
            boxes = text_boxes(tensor, placement, threshold=THRESHOLD, box_threshold=BOX_THRESHOLD,
                               batch_index=batch_index)  # fmt: skip
            return Outcome(boxes=tuple((b.x0, b.y0, b.x1, b.y1) for b in boxes))
        top = softmax_topk(tensor, 5, quant, batch_index=batch_index)
        return Outcome(classes=tuple(c for c, _ in top))


def _no_boxes(plane: npt.NDArray[np.float32]) -> list[BoxTuple]:
    return []


def _db_postprocess() -> Callable[[npt.NDArray[np.float32]], list[BoxTuple]]:
    """rapidocr's DBPostProcess (its config's values) -> canvas boxes; scipy as fallback."""
    try:
        from rapidocr_onnxruntime.ch_ppocr_det.utils import (  # type: ignore[import-untyped]
            DBPostProcess,
        )
    except ImportError as exc:  # rapidocr or OpenCV missing: label components with scipy
        logger.info("rapidocr DBPostProcess unavailable (%s): scipy.ndimage labels", exc)
        return _scipy_boxes
    db = DBPostProcess(thresh=THRESHOLD, box_thresh=BOX_THRESHOLD, max_candidates=1000,
                       unclip_ratio=1.6, score_mode="fast", use_dilation=True)  # fmt: skip

    def run(plane: npt.NDArray[np.float32]) -> list[BoxTuple]:
        h, w = plane.shape
        quads, _ = db(plane[None, None], (h, w))
        return [(float(q[:, 0].min()), float(q[:, 1].min()), float(q[:, 0].max()),
                 float(q[:, 1].max())) for q in quads]  # fmt: skip

    return run


def _scipy_boxes(plane: npt.NDArray[np.float32]) -> list[BoxTuple]:
    from scipy import ndimage

    labels, _ = ndimage.label(plane > THRESHOLD, structure=np.ones((3, 3)))
    boxes = []
    for index, found in enumerate(ndimage.find_objects(labels), start=1):
        if found is None:
            continue
        ys, xs = found
        score = float(plane[found][labels[found] == index].mean())
        w, h = xs.stop - xs.start, ys.stop - ys.start
        if score < BOX_THRESHOLD or min(w, h) < 3:
            continue
        grow = w * h * 1.5 / (2.0 * (w + h))
        boxes.append((xs.start - grow, ys.start - grow, xs.stop + grow, ys.stop + grow))
    return boxes
