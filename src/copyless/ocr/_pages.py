"""Drawn document pages with known text (for tests, benchmarks and demos).

A page is tinted paper with lines of words in several sizes and colours, drawn with
Pillow's bundled TrueType font (``ImageFont.load_default(size=N)``: no system font needed).
The same seed gives the same page on every machine with the same Pillow.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..vision import need

__all__ = ["DrawnPage", "draw_page"]

_WORDS = [
    "invoice",
    "total",
    "amount",
    "paid",
    "order",
    "number",
    "date",
    "account",
    "balance",
    "customer",
    "service",
    "shipping",
    "address",
    "delivery",
    "payment",
    "method",
    "reference",
    "summary",
    "quarterly",
    "report",
    "revenue",
    "growth",
    "market",
    "share",
    "product",
    "release",
    "version",
    "update",
    "notes",
    "meeting",
    "agenda",
    "minutes",
    "project",
    "status",
    "budget",
    "review",
    "approved",
    "pending",
    "signed",
    "contract",
    "terms",
    "conditions",
    "page",
    "section",
    "chapter",
    "figure",
    "table",
    "value",
    "price",
    "quantity",
    "discount",
    "tax",
    "subtotal",
    "north",
    "south",
    "east",
    "west",
    "street",
    "avenue",
    "city",
    "postal",
    "code",
    "phone",
    "email",
    "website",
    "open",
    "close",
    "monday",
    "friday",
]
_PAPER = ((250, 248, 240), (238, 243, 250), (246, 240, 226), (242, 250, 242), (255, 255, 255))
_INK = ((20, 20, 20), (30, 40, 120), (120, 20, 20), (20, 90, 40), (70, 70, 70))
_SIZES = (22, 26, 30, 36, 44)


@dataclass(frozen=True, slots=True)
class DrawnPage:
    """A drawn page: ``image`` (H, W, 3) uint8 RGB, ``lines`` its text top to bottom, and
    each line's ``boxes`` (x0, y0, x1, y1) as drawn."""

    image: npt.NDArray[np.uint8]
    lines: tuple[str, ...]
    boxes: tuple[tuple[int, int, int, int], ...]


def _line_text(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(2, 6))]
    if rng.random() < 0.5:
        words.append(str(rng.randint(1, 99999)))
    if rng.random() < 0.3:
        words[0] = words[0].capitalize()
    return " ".join(words)


def draw_page(seed: int, *, size: tuple[int, int] = (1240, 1754), lines: int = 12) -> DrawnPage:
    """Draw page ``seed``: ``size`` is (width, height) (A4 at 150 dpi by default); ``lines``
    lines of 2-7 words, one size and colour per line, left-aligned with varied indents."""
    image_mod, draw_mod, font_mod = need("PIL.Image"), need("PIL.ImageDraw"), need("PIL.ImageFont")
    rng = random.Random(seed)
    width, height = size
    page = image_mod.new("RGB", size, _PAPER[seed % len(_PAPER)])
    draw = draw_mod.Draw(page)
    texts, boxes = [], []
    y = rng.randint(40, 90)
    for _ in range(lines):
        font_size = rng.choice(_SIZES)
        text = _line_text(rng)
        x = rng.randint(40, 160)
        while True:  # shorter lines, then smaller type, until the line fits the width
            font = font_mod.load_default(size=font_size)
            x0, y0, x1, y1 = (int(v) for v in draw.textbbox((x, y), text, font=font))
            if x1 <= width - 20 or (" " not in text and font_size <= min(_SIZES)):
                break
            if " " in text:
                text = text.rsplit(" ", 1)[0]
            else:
                font_size = min(_SIZES)
        if y1 > height - 20:
            break
        draw.text((x, y), text, fill=rng.choice(_INK), font=font)
        texts.append(text)
        boxes.append((x0, y0, x1, y1))
        y = y1 + rng.randint(int(font_size * 0.8), int(font_size * 2.0))
    return DrawnPage(np.asarray(page, dtype=np.uint8).copy(), tuple(texts), tuple(boxes))
