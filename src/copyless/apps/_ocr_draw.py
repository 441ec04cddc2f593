"""Drawing OCR results: each line's rotated box and its text above it, on a copy of the page."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ..ocr import OcrLine
from ..vision import need

_BOX = (220, 30, 30)
_TEXT = (20, 60, 200)


def draw_lines(
    image: npt.NDArray[np.uint8], lines: Sequence[OcrLine], out_path: str | os.PathLike[str]
) -> Path:
    """Save ``image`` with every line's quad outlined and its text written just above it
    (Pillow's bundled TrueType font, sized to the line) as a PNG. Copies the image once."""
    pil, draw_mod, font_mod = need("PIL.Image"), need("PIL.ImageDraw"), need("PIL.ImageFont")
    canvas = pil.fromarray(np.ascontiguousarray(image[..., :3])).convert("RGB")
    draw = draw_mod.Draw(canvas)
    for line in lines:
        draw.polygon([tuple(p) for p in line.quad], outline=_BOX, width=2)
        x0, y0, _, y1 = line.box
        size = max(10, min(40, int((y1 - y0) * 0.6)))
        font = font_mod.load_default(size=size)
        draw.text((x0, max(0, y0 - size - 2)), line.text, fill=_TEXT, font=font)
    path = Path(out_path)
    canvas.save(path, format="PNG")
    return path
