"""A real browser for the live-page tests: headless Chromium (Debian's ``chromium``, installed
by ``.ci/browser``) takes a screenshot of a page; the tiles are found in it by colour.

Imported by basename (this folder is on ``sys.path`` under pytest).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium; "
    "see .ci/browser)"
)  # fmt: skip

PAGE_BACKGROUND = (0x11, 0x11, 0x11)  # body's colour in the page's style sheet
TILE_BACKGROUND = (0x22, 0x22, 0x22)  # a figure's


def screenshot(
    url: str, path: Path, wait_ms: int = 5000, size: tuple[int, int] = (1280, 900)
) -> Path:
    """Load ``url`` in headless Chromium and save a ``size`` screenshot to ``path``, taken
    ``wait_ms`` after loading starts (the page's MJPEG images never finish loading, so
    Chromium's ``--timeout`` stops the load and the screenshot shows what had arrived)."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        command = [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", f"--timeout={wait_ms}",
            f"--window-size={size[0]},{size[1]}", f"--screenshot={path}", url,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and path.exists(), done.stderr[-2000:]
    return path


def tiles(path: Path) -> list[np.ndarray]:
    """The tiles of a screenshot of the page, left to right, top to bottom: each the pixels
    of one ``<figure>`` (a region that is not the page's background)."""
    image = np.asarray(Image.open(path).convert("RGB"))
    mask = np.any(image != PAGE_BACKGROUND, axis=2)
    labels, _ = ndimage.label(mask)
    boxes = [b for b in ndimage.find_objects(labels) if b is not None]
    boxes = [b for b in boxes if b[0].stop - b[0].start > 100 and b[1].stop - b[1].start > 100]
    boxes.sort(key=lambda b: (b[0].start // 50, b[1].start))
    return [image[b] for b in boxes]


def shows_a_frame(tile: np.ndarray) -> bool:
    """The middle of the tile (where its image is, away from caption and figures) is not
    one flat colour: a frame is shown, not a blank or broken image."""
    rows, cols = tile.shape[:2]
    middle = tile[rows // 4 : rows * 3 // 4, cols // 8 : cols * 7 // 8]
    return float(middle.std()) > 20.0 and len(np.unique(middle.reshape(-1, 3), axis=0)) > 500
