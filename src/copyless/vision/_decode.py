"""Image decoding to ``(H, W, 3)`` uint8 RGB, upright: the one image reader of every app and
of the Python API.

Every format Pillow opens (JPEG, PNG, WebP, BMP, TIFF, GIF and the rest; a GIF's or TIFF's
first frame) and, where Pillow cannot, float TIFFs through tifffile when it is installed.
What the pixels become (EXIF orientation applied, 16-bit and float samples scaled, CMYK,
palettes, alpha and greyscale converted) is :mod:`copyless.types`' pixel rules (``as_rgb``,
``pil_rgb``, ``orient``), the same for files, encoded bytes, Pillow images and numpy arrays.

JPEG goes through simplejpeg (libjpeg-turbo). When the caller needs only a smaller image
(``min_size``, in upright pixels), libjpeg-turbo downscales in the DCT domain while
decoding, by the largest of 1/2, 1/4, 1/8 whose result still has at least ``min_size``: a
2000x1500 photo needed at 256 decodes at 500x375 about twice as fast as in full. Other
formats and the few JPEGs libjpeg-turbo's RGB path refuses (e.g. CMYK) go through Pillow;
``min_size`` is then only honoured for JPEG (Pillow's ``draft``).

Errors: :class:`FileNotFoundError` for a missing file, :class:`ValueError` naming the path
(or ``<bytes>``) for data that is no decodable image: empty, truncated, of a format
nothing here reads, a directory or a device.

Copies: the decoder writes the returned array once; an image turned upright, or decoded by
Pillow, is copied once more into the returned array.

simplejpeg and Pillow come with the ``vision`` extra; without them decoding raises
UnsupportedError saying so.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import stat
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..types import as_rgb, jpeg_orientation, orient, pil_orientation, pil_rgb, upright_size
from ._extra import need

logger = logging.getLogger(__name__)

_JPEG_MAGIC = b"\xff\xd8\xff"
_TIFF_MAGIC = (b"II*\x00", b"MM\x00*")

#: How many times the resize's output size a JPEG is decoded at, at least, before the
#: antialiased resize (:func:`~copyless.vision.classify_preprocess`, ``letterbox``,
#: ``stretch``): pass ``min_size`` = output size x this. The DCT-domain reduction is not
#: PIL's filter; with 2x headroom the resize's triangle filter dominates. Measured on 80
#: seeded photo variants against a full decode + PIL bilinear: mean |diff| 0.81 levels at
#: 1x (p95 2.99), 0.22 at 2x (p95 0.78), 0.12 at full size (the resize's own rounding).
DECODE_HEADROOM = 2

#: A file or encoded bytes (what :func:`decode` reads; it also takes Pillow images and numpy
#: arrays: :data:`AnyImage`).
ImageSource = str | os.PathLike[str] | bytes | bytearray | memoryview
#: Whatever the apps and the Python API take as a picture.
AnyImage = ImageSource | npt.NDArray[Any] | Any  # Any: a PIL.Image.Image (an optional extra)


@dataclass(frozen=True, slots=True)
class ReadLimit:
    """The memory one decoded image may take: ``max_bytes``, counted as ``copies`` arrays of
    3 bytes a pixel plus the encoded bytes; ``source`` says what sets it (for the error)."""

    max_bytes: int
    source: str
    copies: int = 3

    def need(self, height: int, width: int, encoded: int = 0) -> int:
        """Bytes a ``width`` x ``height`` image of ``encoded`` bytes takes to read."""
        return encoded + self.copies * 3 * height * width

    def check(self, name: str, height: int, width: int, encoded: int = 0) -> None:
        """:class:`ImageTooLargeError` when the image needs more than ``max_bytes``."""
        need = self.need(height, width, encoded)
        if need > self.max_bytes:
            raise ImageTooLargeError(
                f"{name}: not decoded: a {width}x{height} image needs about "
                f"{need / (1 << 20):.0f} MiB of memory to read, more than the "
                f"{self.max_bytes / (1 << 20):.0f} MiB {self.source}"
            )


class ImageTooLargeError(ValueError):
    """An image whose decoding would take more memory than its :class:`ReadLimit`."""


def decode(
    source: AnyImage,
    *,
    min_size: tuple[int, int] | None = None,
    limit: ReadLimit | None = None,
) -> npt.NDArray[np.uint8]:
    """A C-contiguous ``(H, W, 3)`` uint8 RGB array of ``source``, upright: an image file,
    encoded bytes, a Pillow image or a numpy array (see the module docstring).

    ``min_size`` is ``(min_height, min_width)`` of the upright picture: the caller needs
    no more than that, so a JPEG may be decoded downscaled (never below ``min_size``, never
    above full size). ``limit``: refuse (:class:`ImageTooLargeError`, a ``ValueError``)
    an image whose header says it needs more memory, before decoding it. Raises
    ``FileNotFoundError`` for a missing file and ``ValueError`` with the path (or
    ``<bytes>``) for data that is no decodable image.
    """
    min_h, min_w = _min_size(min_size)
    if isinstance(source, np.ndarray):
        return as_rgb(source)
    if _is_pil_image(source):
        return _from_pil(source, "<PIL image>")
    data, name = read_source(source)
    if limit is not None:
        height, width = _size_of(io.BytesIO(data), name)
        limit.check(name, height, width, len(data))
    if data[:3] == _JPEG_MAGIC:
        turn = jpeg_orientation(data)
        want_h, want_w = upright_size(min_h, min_w, turn)  # the stored picture's sides
        try:
            image = _decode_jpeg(data, want_h, want_w)
        except ValueError as exc:
            logger.debug("libjpeg-turbo refused %s (%s); decoding with Pillow", name, exc)
        else:
            return as_rgb(orient(image, turn))
    return _decode_pillow(data, name, min_h, min_w)


def read_source(source: ImageSource) -> tuple[bytes, str]:
    """The encoded bytes of ``source`` and the name errors give it. A path must be a
    regular file (or a pipe, read to its end): a directory or a device is a ValueError."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, name = bytes(source), "<bytes>"
    elif isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        if os.path.isdir(name):  # open() would raise IsADirectoryError, an OSError
            raise ValueError(f"{name}: not a decodable image (a directory)")
        with open(name, "rb") as f:  # FileNotFoundError propagates as documented
            _check_file(f, name)
            data = f.read()
    else:
        raise TypeError(
            "an image is a path, encoded bytes, a PIL image or a numpy array; got "
            f"{type(source).__name__}"
        )
    if not data:
        raise ValueError(f"{name}: not a decodable image (empty: 0 bytes)")
    return data, name


def _decode_jpeg(data: bytes, min_h: int, min_w: int) -> Any:
    """libjpeg-turbo decode at the smallest power-of-two scale still covering min_size.

    Only 1/2, 1/4 and 1/8 are used: its other k/8 scales decode slower than these, some
    slower than the full image (measured with libjpeg-turbo 3 through simplejpeg 1.9).
    """
    simplejpeg = need("simplejpeg")
    factor = 1
    if min_h or min_w:
        height, width = simplejpeg.decode_jpeg_header(data)[:2]
        while factor < 8 and height // (factor * 2) >= min_h and width // (factor * 2) >= min_w:
            factor *= 2
    if factor == 1:
        return simplejpeg.decode_jpeg(data, colorspace="RGB")
    # libjpeg sizes a 1/f scale as ceil(dim / f): asking for that and a factor >= f pins it.
    return simplejpeg.decode_jpeg(
        data,
        colorspace="RGB",
        min_height=-(-height // factor),
        min_width=-(-width // factor),
        min_factor=factor,
    )


def _min_size(min_size: tuple[int, int] | None) -> tuple[int, int]:
    if min_size is None:
        return 0, 0
    try:
        min_h, min_w = (int(v) for v in min_size)
    except (TypeError, ValueError):
        raise ValueError(f"min_size must be (height, width), got {min_size!r}") from None
    if min_h < 0 or min_w < 0:
        raise ValueError(f"min_size must be >= 0, got {min_size!r}")
    return min_h, min_w


def _decode_pillow(data: bytes, name: str, min_h: int, min_w: int) -> npt.NDArray[np.uint8]:
    image = need("PIL.Image")
    try:
        with _quiet_bombs(), image.open(io.BytesIO(data)) as img:
            if img.format == "JPEG" and (min_h or min_w):
                want_h, want_w = upright_size(min_h, min_w, pil_orientation(img))
                img.draft("RGB", (max(want_w, 1), max(want_h, 1)))
            img.load()
            turn = pil_orientation(img)  # after load: Pillow turns some formats itself (TIFF)
            pixels = pil_rgb(img)
    except image.UnidentifiedImageError:
        float_tiff = _tifffile(data, name)
        if float_tiff is not None:
            return float_tiff
        # Pillow's own message names the BytesIO it read, not the file
        raise ValueError(f"{name}: not a decodable image (format not recognised)") from None
    except image.DecompressionBombError as exc:
        raise ValueError(f"{name}: not decoded ({exc})") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ValueError(f"{name}: not a decodable image ({exc})") from None
    return as_rgb(orient(pixels, turn))


def _from_pil(img: Any, name: str) -> npt.NDArray[np.uint8]:
    """A Pillow image (its first frame) turned upright and converted by :func:`pil_rgb`."""
    try:
        img.load()
    except (OSError, SyntaxError, ValueError) as exc:
        raise ValueError(f"{name}: not a decodable image ({exc})") from None
    return as_rgb(orient(pil_rgb(img), pil_orientation(img)))


def _tifffile(data: bytes, name: str) -> npt.NDArray[np.uint8] | None:
    """A TIFF Pillow cannot open (float RGB samples) through tifffile, when installed."""
    tifffile = _optional_tifffile() if data[:4] in _TIFF_MAGIC else None
    if tifffile is None:
        return None
    try:
        pixels = tifffile.imread(io.BytesIO(data), key=0)
    except Exception as exc:  # noqa: BLE001 - tifffile raises many types for bad files
        raise ValueError(f"{name}: not a decodable image ({exc})") from None
    return as_rgb(pixels)


def _is_pil_image(obj: object) -> bool:
    module = type(obj).__module__
    return module.startswith("PIL.") and hasattr(obj, "getexif") and hasattr(obj, "mode")


@contextlib.contextmanager
def _quiet_bombs() -> Iterator[None]:
    """Pillow's DecompressionBombWarning off: the apps estimate memory before decoding
    (and Pillow still refuses what is past twice its limit)."""
    image = need("PIL.Image")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", image.DecompressionBombWarning)
        yield


def image_size(source: ImageSource) -> tuple[int, int]:
    """``(height, width)`` of the picture :func:`decode` returns (upright), read from its
    header (nothing is decoded). Raises as :func:`decode` does: ``FileNotFoundError`` for
    a missing file, ``ValueError`` naming the path for data that is no image."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, name = read_source(source)
        return _size_of(io.BytesIO(data), name)
    name = os.fspath(source)
    if os.path.isdir(name):
        raise ValueError(f"{name}: not a decodable image (a directory)")
    with open(name, "rb") as f:  # FileNotFoundError propagates as documented
        _check_file(f, name)
        return _size_of(f, name)


def _size_of(f: Any, name: str) -> tuple[int, int]:
    image = need("PIL.Image")
    try:
        with _quiet_bombs(), image.open(f) as img:  # a file given to Pillow stays ours
            return _upright_size(img)
    except image.UnidentifiedImageError:
        return _tiff_size(f, name)
    except image.DecompressionBombError as exc:
        raise ValueError(f"{name}: not decoded ({exc})") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ValueError(f"{name}: not a decodable image ({exc})") from None


def _upright_size(img: Any) -> tuple[int, int]:
    """``(height, width)`` of an opened Pillow image once :func:`_from_pil` turned it."""
    width, height = img.size
    turn = pil_orientation(img)
    if img.format == "TIFF" and turn in (5, 6, 7, 8):
        stored = (img.tag_v2.get(256), img.tag_v2.get(257))  # ImageWidth, ImageLength
        if (width, height) != stored:  # newer Pillow (13 here) reports and loads TIFFs upright
            turn = 1
    return upright_size(int(height), int(width), turn)


def _check_file(f: Any, name: str) -> None:
    st = os.fstat(f.fileno())
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{name}: not a decodable image (a directory)")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        raise ValueError(f"{name}: not a decodable image (not a regular file)")
    if stat.S_ISREG(st.st_mode) and st.st_size == 0:
        raise ValueError(f"{name}: not a decodable image (empty: 0 bytes)")


def _tiff_size(f: Any, name: str) -> tuple[int, int]:
    """A float TIFF's size through tifffile (as :func:`decode` reads it), else refused."""
    f.seek(0)
    tifffile = _optional_tifffile() if f.read(4) in _TIFF_MAGIC else None
    if tifffile is None:
        raise ValueError(f"{name}: not a decodable image (format not recognised)")
    f.seek(0)
    try:
        with tifffile.TiffFile(f) as tif:
            shape = tif.pages[0].shape
    except Exception as exc:  # noqa: BLE001 - tifffile raises many types for bad files
        raise ValueError(f"{name}: not a decodable image ({exc})") from None
    return int(shape[0]), int(shape[1])


def _optional_tifffile() -> Any:
    try:
        import tifffile
    except ImportError:
        return None
    return tifffile
