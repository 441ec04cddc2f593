"""Real photos with known content, from the images scikit-image bundles in its wheel.

``photo_path("chelsea")`` is the bundled PNG itself (no copy); ``photo_path("chelsea.jpg")``
is a JPEG (quality 95) written once into ``<cache root>/photos`` with Pillow, for pipelines
that decode JPEG. Content: ``chelsea`` a tabby cat (ImageNet 281/282/285), ``coffee`` a cup of
espresso (967), ``astronaut`` a portrait (no ImageNet class), ``page`` printed text
(grayscale; good for the text detector).
"""

from __future__ import annotations

import io
from pathlib import Path

from ...types import UnsupportedError
from ._cache import cache_root, cached_file
from ._sources import package_file

__all__ = ["PHOTOS", "photo_names", "photo_path"]

PHOTOS: dict[str, str] = {
    "astronaut": "a portrait of an astronaut (no ImageNet class)",
    "chelsea": "Chelsea the cat, a tabby (ImageNet 281/282/285)",
    "coffee": "a cup of espresso (ImageNet 967)",
    "page": "a page of printed text (grayscale)",
}
_SUFFIXES = (".png", ".jpg", ".jpeg")


def photo_names() -> list[str]:
    """The photo names :func:`photo_path` accepts (each also as ``NAME.png`` / ``NAME.jpg``)."""
    return sorted(PHOTOS)


def _jpeg_bytes(png: Path) -> bytes:
    from PIL import Image  # Pillow only when a JPEG is first asked for

    with Image.open(png) as image:
        rgb = image.convert("L" if image.mode in ("L", "I;16") else "RGB")
        out = io.BytesIO()
        rgb.save(out, format="JPEG", quality=95)
    return out.getvalue()


def photo_path(name: str) -> Path:
    """The path of a real photo file on disk.

    ``name`` is one of :func:`photo_names`, optionally with ``.png`` (the default) or
    ``.jpg``/``.jpeg``. Raises :class:`UnsupportedError` for an unknown name or when
    scikit-image is not installed.
    """
    stem, suffix = name, ".png"
    for candidate in _SUFFIXES:
        if name.lower().endswith(candidate):
            stem, suffix = name[: -len(candidate)], candidate
    if stem not in PHOTOS:
        raise UnsupportedError(f"unknown photo {name!r}; choose from {', '.join(photo_names())}")
    png = package_file("skimage", f"data/{stem}.png")
    if suffix == ".png":
        return png
    path, _ = cached_file(cache_root() / "photos" / f"{stem}.jpg", lambda: _jpeg_bytes(png))
    return path
