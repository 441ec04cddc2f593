"""Pixels as the apps take them: ``(H, W, 3)`` uint8 RGB, upright, from whatever an image
holds (the one set of rules :func:`~copyless.vision.decode`, every app and the compiler's
calibration images share; here, on the floor every layer reaches).

* Orientation: the EXIF orientation tag (1-8) is applied, so boxes are reported in the
  upright picture and drawn pictures are upright (:func:`orient`, :func:`jpeg_orientation`
  reads the tag from a JPEG's header without Pillow).
* Samples: 8-bit as they are; 16-bit keep their high byte (as Pillow reduces 16-bit RGB
  PNGs and TIFFs, so a 16-bit grey scan and the same scan in RGB give the same pixels);
  float samples are taken as 0..1 (scikit-image's and TIFF's convention), times 255,
  rounded and clipped; bilevel as 0/255. A 16-bit image made from 8-bit pixels (x 257)
  gives back exactly those pixels.
* Colour: greyscale is repeated into R, G and B; CMYK, YCbCr, LAB, HSV and palettes are
  converted by Pillow; an alpha channel (RGBA, LA, a palette's transparency) is composited
  over white, as a viewer shows a transparent picture on a page (RapidOCR does the same for
  dark text), not dropped to whatever colour the transparent pixels hold.

Copies: none for a C-contiguous uint8 RGB array with no orientation to apply; otherwise one
conversion into the returned array.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "ORIENTATION_TAG",
    "as_rgb",
    "jpeg_orientation",
    "orient",
    "pil_orientation",
    "pil_rgb",
    "upright_size",
]

#: EXIF's orientation tag (0x0112).
ORIENTATION_TAG = 0x0112
#: Orientations that swap width and height (a transpose is part of them).
_TRANSPOSED = frozenset({5, 6, 7, 8})
_WHITE = 255


def orient(pixels: npt.NDArray[Any], orientation: int) -> npt.NDArray[Any]:
    """``pixels`` (``(H, W, ...)``) turned upright for EXIF ``orientation`` (1-8; other
    values are taken as 1): the transforms of Pillow's ``ImageOps.exif_transpose``. A view
    (no copy); :func:`as_rgb` makes it contiguous."""
    if orientation == 2:
        return pixels[:, ::-1]
    if orientation == 3:
        return pixels[::-1, ::-1]
    if orientation == 4:
        return pixels[::-1]
    if orientation == 5:
        return pixels.swapaxes(0, 1)
    if orientation == 6:
        return pixels.swapaxes(0, 1)[:, ::-1]
    if orientation == 7:
        return pixels[::-1, ::-1].swapaxes(0, 1)
    if orientation == 8:
        return pixels.swapaxes(0, 1)[::-1]
    return pixels


def upright_size(height: int, width: int, orientation: int) -> tuple[int, int]:
    """``(height, width)`` of a picture stored ``height`` x ``width`` once turned upright."""
    return (width, height) if orientation in _TRANSPOSED else (height, width)


def jpeg_orientation(data: bytes) -> int:
    """The EXIF orientation (1-8) a JPEG's APP1 segment records; 1 when it records none or
    the segment is malformed (a broken tag never makes a picture undecodable)."""
    i, end = 2, len(data)
    while i + 4 <= end and data[i] == 0xFF:
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            i += 2
            continue
        if marker in (0xDA, 0xD9):  # start of scan / end of image: no EXIF after here
            return 1
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker == 0xE1 and data[i + 4 : i + 10] == b"Exif\0\0":
            return _tiff_orientation(data[i + 10 : i + 2 + length])
        i += 2 + length
    return 1


def pil_orientation(image: Any) -> int:
    """The EXIF orientation (1-8) a Pillow image records; 1 when it records none or a broken
    one (a broken EXIF block never makes a picture unreadable)."""
    try:
        value = image.getexif().get(ORIENTATION_TAG, 1)
    except Exception:  # noqa: BLE001 - Pillow raises many types for a broken EXIF block
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _tiff_orientation(tiff: bytes) -> int:
    """The orientation entry of a TIFF header's first IFD (EXIF's layout)."""
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    if order is None:
        return 1
    try:
        (ifd,) = struct.unpack_from(order + "I", tiff, 4)
        (count,) = struct.unpack_from(order + "H", tiff, ifd)
        for k in range(count):
            tag, kind = struct.unpack_from(order + "HH", tiff, ifd + 2 + 12 * k)
            if tag == ORIENTATION_TAG and kind == 3:  # SHORT
                (value,) = struct.unpack_from(order + "H", tiff, ifd + 2 + 12 * k + 8)
                return value if 1 <= value <= 8 else 1
    except struct.error:
        return 1
    return 1


def as_rgb(pixels: Any) -> npt.NDArray[np.uint8]:
    """A numpy image as C-contiguous ``(H, W, 3)`` uint8 RGB (see the module docstring):
    ``(H, W)``, ``(H, W, 1)`` grey, ``(H, W, 2)`` grey + alpha, ``(H, W, 3)`` RGB,
    ``(H, W, 4)`` RGBA; uint8, uint16, bool or float (0..1) samples. Raises
    ``ValueError`` naming the shape or dtype for anything else."""
    array = np.asarray(pixels)
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[..., 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (2, 3, 4)):
        raise ValueError(
            f"an image is (H, W), (H, W, 1), (H, W, 2), (H, W, 3) or (H, W, 4); got {array.shape}"
        )
    if 0 in array.shape[:2]:
        raise ValueError(f"an image of {array.shape[1]}x{array.shape[0]} pixels has no pixels")
    samples = _eight_bit(array)
    if samples.ndim == 2:
        samples = samples[..., None].repeat(3, axis=2)
    elif samples.shape[2] in (2, 4):
        samples = _over_white(samples)
    rgb: npt.NDArray[np.uint8] = np.ascontiguousarray(samples)
    return rgb


def _eight_bit(array: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    dtype = array.dtype
    if dtype == np.uint8:
        return array
    if dtype == np.bool_:
        return array.astype(np.uint8) * np.uint8(255)
    if dtype == np.uint16:
        return (array >> 8).astype(np.uint8)
    if dtype.kind == "f":
        unit: npt.NDArray[np.float64] = np.clip(np.nan_to_num(array, nan=0.0), 0.0, 1.0)
        return np.rint(unit * 255.0).astype(np.uint8)
    if dtype.kind in "iu":  # 32-bit integer samples (Pillow's mode I): 16-bit values
        wide: npt.NDArray[np.uint16] = np.clip(array, 0, 65535).astype(np.uint16)
        return (wide >> 8).astype(np.uint8)
    raise ValueError(f"image samples of dtype {dtype} (use uint8, uint16, bool or float 0..1)")


def _over_white(samples: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """Grey + alpha or RGBA composited over white, in 8 bits (as Pillow's alpha_composite)."""
    colour, alpha = samples[..., :-1], samples[..., -1:]
    if colour.shape[2] == 1:
        colour = colour.repeat(3, axis=2)
    if bool((alpha == 255).all()):
        return colour
    a = alpha.astype(np.uint16)
    blended = (colour.astype(np.uint16) * a + _WHITE * (255 - a) + 127) // 255
    return blended.astype(np.uint8)


def pil_rgb(image: Any) -> npt.NDArray[np.uint8]:
    """A Pillow image (as opened: no orientation applied here) as :func:`as_rgb` gives it:
    16-bit and float modes scaled, alpha and palette transparency over white, the other
    modes converted by Pillow."""
    mode = image.mode
    if mode in ("P", "PA", "RGBa", "La") or "transparency" in image.info:
        return as_rgb(np.asarray(image.convert("RGBA")))
    if mode in ("1", "L", "RGB", "RGBA", "LA", "F") or mode.startswith("I"):
        return as_rgb(np.asarray(image))
    return as_rgb(np.asarray(image.convert("RGB")))  # CMYK, YCbCr, LAB, HSV
