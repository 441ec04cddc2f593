"""Video frames into an image input tensor, as the reference pipeline sees them.

The reference loop a classifier on video is judged against is PyAV's
``frame.to_ndarray(format="rgb24")`` (FFmpeg's swscale) then torchvision's PIL
``Resize(256)`` + ``CenterCrop(224)``. :func:`classify_frame` gives the same pixels, bit for
bit, in ONE pass of the C kernel (:mod:`copyless.vision._kernels`, run without the GIL) over
the decoder's planes, written straight into the tensor:

* colours as swscale's yuv420p -> rgb24 fast path converts them (its x86 code: each 2x2
  block shares its chroma sample, 16-bit fixed point with the coefficients
  :func:`swscale_coefficients` derives from the stream's matrix and range, as
  ``ff_yuv2rgb_c_init_tables`` does);
* then PIL's bilinear resize of the whole frame (its 22-bit fixed-point taps, two passes each
  rounded to whole levels, in the order the installed Pillow takes them:
  :func:`pil_vertical_first`), of which only the centre crop is computed.

Exact for frames of even height (every 4:2:0 H.264/HEVC/VP9 stream). swscale converts a
frame of odd height through its general scaler (chroma interpolated, not repeated): there
the pixels are under a level apart on average, a few levels at colour edges. NV12's
interleaved chroma is read in place (two views of pixel stride 2); padded lines are read
where they lie. Copies: none (planes with packed luma pixels; another luma layout is copied
once).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import numpy as np
import numpy.typing as npt

from ..types import DataType
from . import _kernels
from ._formats import ColourFormat, Destination, image_view
from ._preprocess import _format, resize_crop

#: swscale's ``ff_yuv2rgb_coeffs`` rows (crv, cbu, cgu, cgv; 16.16) for the matrices a
#: :class:`~copyless.vision.StreamInfo` names: BT.601 (its default, also for unspecified
#: streams) and BT.709.
SWSCALE_MATRICES = {
    "bt601": (104597, 132201, 25675, 53279),
    "bt709": (117489, 138438, 13975, 34925),
}
YUV_RANGES = ("limited", "full")
#: The largest frame side (and resized side) the kernel takes.
FRAME_MAX = 1 << 16

Planes = Sequence[npt.NDArray[np.uint8]]


def _int16(value: float) -> int:
    """swscale's roundToInt16: (v + 2^15) >> 16, saturated."""
    return max(-0x8000, min(0x7FFF, (int(value) + (1 << 15)) >> 16))


@functools.cache
def swscale_coefficients(yuv_matrix: str = "bt601", yuv_range: str = "limited") -> tuple[int, ...]:
    """The six 16-bit coefficients swscale's yuv2rgb code runs with for this matrix and range
    (default contrast, saturation and brightness): y, vr, ub, vg, ug, y offset."""
    if yuv_matrix not in SWSCALE_MATRICES:
        raise ValueError(
            f"yuv_matrix must be one of {sorted(SWSCALE_MATRICES)}, got {yuv_matrix!r}"
        )
    if yuv_range not in YUV_RANGES:
        raise ValueError(f"yuv_range must be one of {YUV_RANGES}, got {yuv_range!r}")
    crv, cbu, cgu, cgv = SWSCALE_MATRICES[yuv_matrix]
    cgu, cgv = -cgu, -cgv
    cy, oy = 1 << 16, 0
    if yuv_range == "limited":
        cy, oy = (cy * 255) // 219, 16 << 16
    else:
        crv, cbu, cgu, cgv = (c * 224 // 255 for c in (crv, cbu, cgu, cgv))
    # contrast and saturation 1.0 (1 << 16 each): crv * (1 << 32) >> 32 == crv
    return (_int16(cy << 13), _int16(crv << 13), _int16(cbu << 13), _int16(cgv << 13),
            _int16(cgu << 13), _int16(oy << 3))  # fmt: skip


@functools.cache
def _pillow_orders_passes() -> bool:
    """Whether the installed Pillow (13 and later; none installed: the same) may resample
    vertically first."""
    try:
        major = int(metadata.version("pillow").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return True
    return major >= 13


def pil_vertical_first(width: int, height: int, new_width: int, new_height: int) -> bool:
    """Whether Pillow resizes ``width`` x ``height`` to ``new_width`` x ``new_height`` with
    its vertical pass first: Pillow 13 does when the frame loses rows and more than twice as
    many rows as columns (each pass rounds to whole levels, so the order shows in the
    pixels); earlier Pillow always goes horizontally first."""
    if width == new_width or height == new_height or not _pillow_orders_passes():
        return False
    lost_rows = height - new_height
    return lost_rows > 0 and lost_rows > 2 * (width - new_width)


def classify_frame(
    planes: Planes,
    dst: Destination,
    *,
    yuv_matrix: str = "bt601",
    yuv_range: str = "limited",
    colour_format: ColourFormat | None = None,
    resize_short: int = 256,
    crop: int = 224,
    batch_index: int = 0,
) -> None:
    """Write a 4:2:0 frame's ``planes`` into image ``batch_index`` of ``dst`` as the
    reference pipeline sees it (module docstring): swscale's rgb24 pixels, PIL's bilinear
    resize of the short side to ``resize_short``, the centre ``crop`` x ``crop``.

    ``planes``: ``(Y, U, V)`` (I420) or ``(Y, UV)`` (NV12, UV ``[H/2, W/2, 2]``) uint8
    arrays: Y ``(H, W)``, chroma ``((H + 1) // 2, (W + 1) // 2)``; views of padded lines
    are fine. ``yuv_matrix`` / ``yuv_range``: the stream's (its
    :class:`~copyless.vision.StreamInfo`). ``dst`` and ``colour_format`` as for
    :func:`~copyless.vision.classify_preprocess` (any image format; the pixels are whole
    levels). Raises ``ValueError`` for planes of other shapes or types, ``LayoutError`` for
    a destination that holds no ``crop`` x ``crop`` images.
    """
    y, u, v = _planes(planes)
    if not 0 < crop <= resize_short:
        raise ValueError(f"crop must be in 1..resize_short ({resize_short}), got {crop}")
    coefficients = swscale_coefficients(yuv_matrix, yuv_range)
    fmt = _format(dst, colour_format)
    view = image_view(dst, fmt, crop, crop, batch_index)
    height, width = y.shape
    size, origin = resize_crop(width, height, resize_short, crop)
    if max(size) > FRAME_MAX:
        raise ValueError(f"a {width}x{height} frame resized to {size[0]}x{size[1]} is too "
                         f"large (sides up to {FRAME_MAX})")  # fmt: skip
    order = pil_vertical_first(width, height, *size)
    if fmt.data_type is DataType.BF16:
        _kernels.yuv_resize(y, u, v, view.view(np.uint16), size, origin, coefficients, order,
                            fmt.bgr, True)  # fmt: skip
    else:
        _kernels.yuv_resize(y, u, v, view, size, origin, coefficients, order, fmt.bgr)


def _planes(planes: Any) -> tuple[npt.NDArray[np.uint8], ...]:
    """Y, U, V as 2-D uint8 views (NV12's UV split in place); ValueError naming what is off."""
    if not isinstance(planes, (tuple, list)) or len(planes) not in (2, 3):
        raise ValueError("planes must be (Y, U, V) or (Y, UV) arrays")
    if not all(isinstance(p, np.ndarray) and p.dtype == np.uint8 for p in planes):
        raise ValueError("planes must be uint8 numpy arrays")
    y = planes[0]
    if y.ndim != 2 or min(y.shape) < 1 or max(y.shape) > FRAME_MAX:
        raise ValueError(f"the Y plane must be (H, W) with sides in 1..{FRAME_MAX}, got {y.shape}")
    if y.strides[1] != 1 or y.strides[0] < y.shape[1]:
        y = np.ascontiguousarray(y)  # the kernel reads luma rows of packed pixels
    chroma = ((y.shape[0] + 1) // 2, (y.shape[1] + 1) // 2)
    if len(planes) == 2:
        uv = planes[1]
        if uv.shape != (*chroma, 2):
            raise ValueError(f"the UV plane of a {y.shape} frame is {(*chroma, 2)}, got {uv.shape}")
        u, v = uv[..., 0], uv[..., 1]
    else:
        u, v = planes[1], planes[2]
        if u.shape != chroma or v.shape != chroma:
            raise ValueError(f"the U and V planes of a {y.shape} frame are {chroma}, got "
                             f"{u.shape} and {v.shape}")  # fmt: skip
    u, v = (p if p.strides[0] > 0 and p.strides[1] > 0 else np.ascontiguousarray(p)
            for p in (u, v))  # fmt: skip
    return y, u, v
