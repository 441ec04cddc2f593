"""Reading and drawing a segmenter's output: a class mask (``mask [N, H, W]``, the argmax the
compiler folds in) or per-pixel class scores (``[N, C, H, W]``, argmax taken here).

:func:`class_mask` reads one image's mask (a view of the output where it is a mask, one
argmax pass where it is scores); :func:`mask_to_image` maps it to the photo's pixels through
where the preprocess put the photo (nearest neighbour; pixels outside the model's picture
get :data:`OUTSIDE`); :func:`mask_summary` counts the classes; :func:`draw_mask` paints them
over the photo.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ._extra import need
from ._formats import _tensor_array
from ._postprocess import image_format
from ._preprocess import Letterbox

logger = logging.getLogger(__name__)

__all__ = [
    "OUTSIDE",
    "MaskClass",
    "class_mask",
    "draw_mask",
    "mask_summary",
    "mask_to_image",
    "paint_mask_yuv",
]

#: The value of a photo pixel the model did not see (a crop's borders).
OUTSIDE = -1


@dataclass(frozen=True, slots=True)
class MaskClass:
    """One class of a mask: its id, name, pixel count and the fraction of the pixels."""

    class_id: int
    label: str
    pixels: int
    fraction: float

    def line(self) -> str:
        """``mask: CLASS_ID LABEL PIXELS FRACTION`` (what copyless-detect prints)."""
        return f"mask: {self.class_id} {self.label} {self.pixels} {self.fraction:.3f}"


def class_mask(output: NpuTensor | npt.NDArray[Any], batch_index: int = 0) -> npt.NDArray[Any]:
    """Image ``batch_index``'s ``[H, W]`` class ids from a mask ``[N, H, W]`` (a view, no
    copy) or class scores ``[N, C, H, W]`` (argmax over C: one pass, a new array)."""
    array = output if isinstance(output, np.ndarray) else _tensor_array(output)[0]
    if array.ndim == 3:
        mask: npt.NDArray[Any] = array[batch_index]
        return mask
    if array.ndim == 4:
        best: npt.NDArray[Any] = np.argmax(array[batch_index], axis=0)
        return best
    raise ValueError(f"a mask is [N, H, W] or class scores [N, C, H, W]; got {array.shape}")


def mask_to_image(
    mask: npt.NDArray[Any],
    placement: Letterbox | tuple[float, float],
    size: tuple[int, int],
) -> npt.NDArray[np.int32]:
    """``mask`` (model-input pixels) as the photo's ``size`` (H, W) label map: nearest
    neighbour through ``placement`` (a :class:`Letterbox`: photo * scale + pad, which also
    describes a crop with negative pads; or :func:`stretch`'s ``(sx, sy)``: photo / s);
    pixels mapped outside the mask are :data:`OUTSIDE`."""
    height, width = size
    if isinstance(placement, Letterbox):
        cols = (np.arange(width) + 0.5) * placement.scale + placement.pad_x
        rows = (np.arange(height) + 0.5) * placement.scale + placement.pad_y
    else:
        sx, sy = placement
        cols, rows = (np.arange(width) + 0.5) / sx, (np.arange(height) + 0.5) / sy
    xi, yi = np.floor(cols).astype(np.int64), np.floor(rows).astype(np.int64)
    inside_x = (xi >= 0) & (xi < mask.shape[1])
    inside_y = (yi >= 0) & (yi < mask.shape[0])
    picked = mask[np.clip(yi, 0, mask.shape[0] - 1)][:, np.clip(xi, 0, mask.shape[1] - 1)]
    out: npt.NDArray[np.int32] = picked.astype(np.int32)
    out[~inside_y, :] = OUTSIDE
    out[:, ~inside_x] = OUTSIDE
    return out


def mask_summary(mask: npt.NDArray[Any], labels: Sequence[str]) -> list[MaskClass]:
    """The classes present in ``mask`` (OUTSIDE pixels not counted), most pixels first."""
    values = mask[mask != OUTSIDE] if np.issubdtype(mask.dtype, np.signedinteger) else mask
    total = int(values.size)
    ids, counts = np.unique(values, return_counts=True)
    found = [MaskClass(int(i), labels[int(i)] if 0 <= int(i) < len(labels) else f"class{int(i)}",
                       int(n), int(n) / total if total else 0.0)
             for i, n in zip(ids, counts, strict=True)]  # fmt: skip
    return sorted(found, key=lambda c: (-c.pixels, c.class_id))


_PALETTE = np.array(
    [(230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
     (70, 240, 240), (240, 50, 230), (128, 128, 0), (0, 128, 128), (170, 110, 40)],
    np.uint16,
)  # fmt: skip


def draw_mask(
    image: npt.NDArray[np.uint8],
    mask: npt.NDArray[Any],
    out_path: str | os.PathLike[str],
    *,
    background: int | None = 0,
) -> Path:
    """Save ``image`` (``(H, W, 3)`` uint8 RGB) with each class of ``mask`` (the photo's
    label map, :func:`mask_to_image`) painted half over it in its class colour; class
    ``background`` (0: torchvision's segmenters' background) and OUTSIDE pixels are left
    as they are. The format follows the extension. Copies the image once."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be uint8 (H, W, 3) RGB, got {image.dtype} {image.shape}")
    if mask.shape != image.shape[:2]:
        raise ValueError(f"the mask {mask.shape} is not the image's size {image.shape[:2]}")
    path = Path(out_path)
    fmt = image_format(path)
    painted = mask != OUTSIDE
    if background is not None:
        painted &= mask != background
    colours = _PALETTE[np.where(painted, mask, 0) % len(_PALETTE)]
    blended = image.astype(np.uint16)
    blended[painted] = (blended[painted] + colours[painted]) // 2
    need("PIL.Image").fromarray(blended.astype(np.uint8)).save(path, format=fmt)
    logger.debug("wrote a mask of %d painted pixels to %s", int(painted.sum()), path)
    return path


def _palette_yuv() -> npt.NDArray[np.float32]:
    """The palette in limited-range BT.601 Y, U, V (what a yuv420p video carries)."""
    rgb = _PALETTE.astype(np.float32)
    matrix = np.array([[0.257, 0.504, 0.098], [-0.148, -0.291, 0.439],
                       [0.439, -0.368, -0.071]], np.float32)  # fmt: skip
    return rgb @ matrix.T + np.array([16, 128, 128], np.float32)


_PALETTE_YUV = _palette_yuv()


def paint_mask_yuv(
    y: npt.NDArray[np.uint8],
    u: npt.NDArray[np.uint8],
    v: npt.NDArray[np.uint8],
    mask: npt.NDArray[Any],
    *,
    background: int | None = 0,
) -> None:
    """Paint ``mask``'s classes half over a 4:2:0 frame's planes in place, as
    :func:`draw_mask` paints a photo (the same colours, BT.601 limited range; ``background``
    and OUTSIDE pixels left as they are). ``mask`` is the frame's label map; one of another
    size is scaled to the luma plane (nearest), so a mask of the model's frame fits too.
    Chroma takes the mask's class at each 2x2 block's top-left pixel. No frame copy."""
    rows, cols = y.shape
    if mask.shape != (rows, cols):
        pick_y = np.minimum(np.arange(rows) * mask.shape[0] // rows, mask.shape[0] - 1)
        pick_x = np.minimum(np.arange(cols) * mask.shape[1] // cols, mask.shape[1] - 1)
        mask = mask[pick_y[:, None], pick_x[None, :]]
    painted = mask != OUTSIDE
    if background is not None:
        painted &= mask != background
    if not painted.any():
        return
    colours = _PALETTE_YUV[np.where(painted, mask, 0) % len(_PALETTE_YUV)]
    luma = (y[painted].astype(np.float32) + colours[..., 0][painted]) / 2
    y[painted] = np.clip(np.rint(luma), 0, 255).astype(np.uint8)
    half = (slice(0, u.shape[0] * 2, 2), slice(0, u.shape[1] * 2, 2))
    small, tones = painted[half], colours[half]
    for plane, channel in ((u, 1), (v, 2)):
        view = plane[: small.shape[0], : small.shape[1]]
        mixed = (view[small].astype(np.float32) + tones[..., channel][small]) / 2
        view[small] = np.clip(np.rint(mixed), 0, 255).astype(np.uint8)
