"""Calibration images as users have them, prepared as the model sees them.

``calibration=`` (``--calibration DIR``) is a directory (every file in it that is not
hidden, in any format Pillow opens: JPEG, PNG, WebP, BMP, TIFF, GIF...), a list of image
files, or, in the Python API, any iterable of images: file paths, Pillow images, numpy
arrays (``(H, W)`` grey, ``(H, W, 3)`` RGB, ``(H, W, 4)`` RGBA; uint8, uint16 or float
0..1 samples) or one stacked array ``[N, H, W(, C)]``. Each image becomes upright RGB
pixels by the rules every copyless image reader follows (:func:`copyless.types.as_rgb`:
EXIF orientation, 16-bit samples, alpha over white, greyscale repeated into R, G and B: a
greyscale photo among colour ones is an image like any other), then the model's own
preprocessing (:func:`calibration_batches`): the recorded resize policy (torchvision's
resize-short-side + centre crop for ``crop``, a letterbox, or a stretch; a YUV model's
``input_crop``), the colour order, and ``(pixel - mean) / std`` in pixel units (``mean`` /
``std`` default to 0 and 1: give the model's own normalisation even without
``input_format``). Any size: the resize makes it the model's.

An item that cannot be read (not an image, truncated, empty, an array of another shape)
is named in one WARNING line and skipped; an OptionError only when none is left. Fewer
usable images than recommended is a WARNING naming the recommended count, not a refusal.

The images the agreement with fp32 is measured on: ``validation=`` (``--validation DIR``,
the same forms) when given, else every :data:`HOLD_OUT`-th calibration image, kept out of
the ranges (with fewer than ``2 * HOLD_OUT`` images nothing is held out: the agreement is
then measured on the calibration images themselves, and the record says so).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..types import (
    NpuTensorInfo,
    OptionError,
    UnsupportedError,
    as_rgb,
    orient,
    pil_orientation,
    pil_rgb,
)
from ._preprocessing import ResizePolicy

_log = logging.getLogger(__name__)

__all__ = [
    "HOLD_OUT",
    "RECOMMENDED",
    "Calibration",
    "ImagePrep",
    "calibration_batches",
    "calibration_items",
]

#: One calibration image in HOLD_OUT is kept out of the ranges to measure the agreement.
HOLD_OUT = 5
#: Fewer usable images than this is a warning: activation ranges fitted on a handful of
#: photos clip what the next photo shows.
RECOMMENDED = 100


@dataclass(frozen=True, slots=True)
class ImagePrep:
    """How the model sees an image: its normalisation (pixel units), resize, colour order."""

    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    resize: ResizePolicy | None = None
    bgr: bool = False


@dataclass(frozen=True, slots=True)
class Calibration:
    """Model-input batches ``[N, C, H, W]``: ``fit`` (the ranges are fitted on them) and
    ``check`` (the agreement with fp32 is measured on them, ``check_from`` says which
    images they are); ``fit_images`` / ``check_images`` count the images (the last batch
    of each is filled up by repeating); ``greyscale`` counts the greyscale photos the
    ranges are fitted on, ``skipped`` names the items that could not be used."""

    fit: list[np.ndarray]
    check: list[np.ndarray]
    fit_images: int
    check_images: int
    check_from: str
    greyscale: int = 0
    skipped: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """The calibration's part of the precision record."""
        return {"images": self.fit_images, "greyscale": self.greyscale,
                "skipped": len(self.skipped)}  # fmt: skip


def calibration_items(value: Any, key: str = "calibration") -> tuple[Any, ...]:
    """``calibration=`` / ``validation=`` as a tuple of items (paths and in-memory images):
    a directory's visible files (sorted), one file, or the items of an iterable. OptionError
    for a path that does not exist, an empty directory or an empty iterable."""
    if value is None:
        return ()
    if isinstance(value, (str, os.PathLike)):
        root = Path(value)
        if root.is_dir():
            files = tuple(sorted(p for p in root.iterdir()
                                 if not p.name.startswith(".") and p.is_file()))  # fmt: skip
            if not files:
                raise OptionError(f"{key}: no files in {str(root)!r}")
            return files
        if not root.exists():
            raise OptionError(f"{key}: no such directory or image file {str(root)!r}")
        return (root,)
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Iterable):
        raise OptionError(
            f"{key} must be a directory, image files or an iterable of images (Pillow images, "
            f"numpy arrays), got {type(value).__name__}"
        )
    items = tuple(Path(v) if isinstance(v, (str, os.PathLike)) else v for v in value)
    if not items:
        raise OptionError(f"{key}: no images given")
    return items


def calibration_batches(
    items: tuple[Any, ...],
    info: NpuTensorInfo,
    prep: ImagePrep,
    *,
    validation: tuple[Any, ...] = (),
    hold_out: int = HOLD_OUT,
    recommended: int = RECOMMENDED,
    purpose: str = "INT8 ranges are fitted on them",
) -> Calibration:
    """The images as the model sees them (module docstring), split into the images the
    ranges are fitted on and the ones the agreement is measured on (``validation``, else
    every ``hold_out``-th; ``hold_out=1``: every image is measured, nothing is fitted)."""
    if len(info.shape) != 4 or info.shape[1] not in (1, 3):
        raise UnsupportedError(
            f"calibration images need an image input [N,1|3,H,W]; {info.describe()} is not one"
        )
    images, greys, skipped = _prepare(items, info, prep, "calibration")
    if len(images) < recommended:
        _log.warning("calibration: %d usable images; %d or more are recommended (%s)",
                     len(images), recommended, purpose)  # fmt: skip
    n = info.shape[0]
    fitted = [True] * len(images)
    if validation:
        check, _, bad = _prepare(validation, info, prep, "validation")
        skipped += bad
        source = "validation"
    elif hold_out <= 1:
        check, fitted, source = images, [False] * len(images), "calibration"
    elif len(images) < 2 * hold_out:
        check, source = images, "calibration (too few to hold any out)"
    else:
        check = images[hold_out - 1 :: hold_out]
        fitted = [i % hold_out != hold_out - 1 for i in range(len(images))]
        source = "held-out calibration"
    fit = [image for image, used in zip(images, fitted, strict=True) if used]
    grey = sum(g for g, used in zip(greys, fitted, strict=True) if used)
    return Calibration(_batches(fit, n, info), _batches(check, n, info), len(fit), len(check),
                       source, grey, tuple(skipped))  # fmt: skip


def _prepare(
    items: tuple[Any, ...], info: NpuTensorInfo, prep: ImagePrep, key: str
) -> tuple[list[np.ndarray], list[bool], list[str]]:
    """The usable items as model inputs ``[C, H, W]``, which are greyscale photos, and the
    names of the skipped ones (each said in one WARNING line). OptionError when none is
    usable."""
    _, c, h, w = info.shape
    m = np.asarray(prep.mean if prep.mean is not None else (0.0,) * 3, np.float32)[:c]
    s = np.asarray(prep.std if prep.std is not None else (1.0,) * 3, np.float32)[:c]
    images: list[np.ndarray] = []
    grey: list[bool] = []
    skipped: list[str] = []
    for _, rgb in _pixels(items, key, skipped):
        grey.append(_is_grey(rgb))
        pixels = np.asarray(_fit(rgb, c, w, h, prep.resize), np.float32).reshape(h, w, c)
        chw = pixels.transpose(2, 0, 1)
        images.append((chw[::-1] if prep.bgr and c == 3 else chw) - m.reshape(c, 1, 1))
        images[-1] /= s.reshape(c, 1, 1)
    if not images:
        raise OptionError(
            f"{key}: none of the {len(items)} items is a readable image (first: {skipped[0]})"
        )
    return images, grey, skipped


def _pixels(items: tuple[Any, ...], key: str, skipped: list[str]) -> Iterator[tuple[str, Any]]:
    """``(name, (H, W, 3) uint8 RGB)`` of every readable item; the others are named in one
    WARNING line each and appended to ``skipped``."""
    for index, item in enumerate(_flatten(items)):
        name = str(item) if isinstance(item, Path) else f"item {index} ({type(item).__name__})"
        try:
            yield name, _rgb(item)
        except (OSError, ValueError, TypeError, SyntaxError) as exc:
            _log.warning("%s: skipped %s: %s", key, name, exc)
            skipped.append(name)


def _flatten(items: tuple[Any, ...]) -> Iterator[Any]:
    """The items, a stacked array ``[N, H, W(, C)]`` given as one item split into N."""
    for item in items:
        if isinstance(item, np.ndarray) and item.ndim == 4:
            yield from item
        else:
            yield item


def _rgb(item: Any) -> Any:
    """One item as ``(H, W, 3)`` uint8 RGB, upright (raises OSError/ValueError/TypeError)."""
    image = _pil()
    if isinstance(item, np.ndarray):
        return as_rgb(item)
    if isinstance(item, image.Image):
        item.load()
        return as_rgb(orient(pil_rgb(item), pil_orientation(item)))
    if not isinstance(item, Path):
        raise TypeError("not an image: give files, Pillow images or numpy arrays")
    try:
        with image.open(item) as img:
            img.load()
            return as_rgb(orient(pil_rgb(img), pil_orientation(img)))
    except image.UnidentifiedImageError:
        raise ValueError("not an image Pillow can read") from None
    except image.DecompressionBombError as exc:
        raise ValueError(str(exc)) from None


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as exc:
        raise UnsupportedError(
            "calibration images are read with Pillow: pip install copyless[vision]"
        ) from exc
    return Image


def _batches(images: list[np.ndarray], n: int, info: NpuTensorInfo) -> list[np.ndarray]:
    """``images`` in batches of ``n``, the last filled up by repeating images."""
    if not images:
        return []
    images = list(images)
    count = len(images)
    while len(images) % n:
        images.append(images[len(images) % count])
    return [np.stack(images[i : i + n]).astype(info.numpy_dtype) for i in range(0, len(images), n)]


def _is_grey(rgb: np.ndarray) -> bool:
    """Whether an RGB image's three channels are the same everywhere."""
    return bool((rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all())


def _fit(rgb: np.ndarray, channels: int, width: int, height: int,
         resize: ResizePolicy | None) -> Any:  # fmt: skip
    """``rgb`` as the model's ``width`` x ``height`` input (PIL, grey for a one-channel
    model) under ``resize``, with PIL's bilinear filter: torchvision's Resize + CenterCrop
    for ``crop``, centred on the fill for ``letterbox``, else stretched."""
    image = _pil()
    picture = image.fromarray(rgb)
    if channels == 1:
        picture = picture.convert("L")
    iw, ih = picture.size
    if resize is not None and resize.policy == "crop":
        short = resize.short_side(min(width, height))
        size = (short, int(short * ih / iw)) if iw <= ih else (int(short * iw / ih), short)
        size = (max(size[0], width), max(size[1], height))
        left, top = round((size[0] - width) / 2.0), round((size[1] - height) / 2.0)
        resized = picture.resize(size, image.Resampling.BILINEAR)
        return resized.crop((left, top, left + width, top + height))
    if resize is not None and resize.policy == "letterbox":
        scale = min(width / iw, height / ih)
        size = (max(1, min(width, round(iw * scale))), max(1, min(height, round(ih * scale))))
        fill = (resize.fill,) * 3 if picture.mode == "RGB" else resize.fill
        canvas = image.new(picture.mode, (width, height), fill)
        canvas.paste(picture.resize(size, image.Resampling.BILINEAR),
                     ((width - size[0]) // 2, (height - size[1]) // 2))  # fmt: skip
        return canvas
    return picture.resize((width, height), image.Resampling.BILINEAR)
