"""A segmenter's mask painted on a photo (draw_mask) and on a 4:2:0 video frame's planes
(paint_mask_yuv, what copyless-video writes): the same colours, half over the picture, the
background and pixels outside the photo left alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from copyless.vision import OUTSIDE, draw_mask
from copyless.vision._masks import paint_mask_yuv


def _yuv(rgb: np.ndarray) -> np.ndarray:
    """BT.601 limited range, as FFmpeg converts rgb24 to yuv420p's luma and chroma."""
    m = np.array([[0.257, 0.504, 0.098], [-0.148, -0.291, 0.439], [0.439, -0.368, -0.071]])
    return rgb.astype(np.float64) @ m.T + np.array([16, 128, 128])


def test_a_frame_is_painted_as_a_photo_is(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    photo = rng.integers(0, 256, (8, 12, 3), dtype=np.uint8)
    mask = np.zeros((8, 12), np.int64)
    mask[:4, :6] = 3  # a painted class, 2x2-block aligned
    mask[4:, 6:] = OUTSIDE
    painted_photo = np.asarray(Image.open(draw_mask(photo, mask, tmp_path / "m.png")))
    yuv = _yuv(photo)
    y = np.rint(yuv[..., 0]).astype(np.uint8)
    u = np.rint(yuv[::2, ::2, 1]).astype(np.uint8)
    v = np.rint(yuv[::2, ::2, 2]).astype(np.uint8)
    y0, u0, v0 = y.copy(), u.copy(), v.copy()
    paint_mask_yuv(y, u, v, mask)
    # the background and OUTSIDE are left alone
    assert (y[4:] == y0[4:]).all() and (y[:4, 6:] == y0[:4, 6:]).all()
    assert (u[2:] == u0[2:]).all() and (v[:, 3:] == v0[:, 3:]).all()
    # the class's pixels are the painted photo's, in YUV (rounding apart)
    want = _yuv(painted_photo[:4, :6])
    assert np.abs(y[:4, :6] - want[..., 0]).max() <= 2
    assert np.abs(u[:2, :3] - want[::2, ::2, 1]).max() <= 2
    assert np.abs(v[:2, :3] - want[::2, ::2, 2]).max() <= 2


def test_a_mask_of_the_models_size_is_scaled_to_the_frame() -> None:
    y = np.full((8, 8), 100, np.uint8)
    u = np.full((4, 4), 128, np.uint8)
    v = np.full((4, 4), 128, np.uint8)
    mask = np.zeros((4, 4), np.int64)
    mask[:2, :2] = 1  # the top-left quarter, in the model's 4x4 frame
    paint_mask_yuv(y, u, v, mask)
    assert (y[:4, :4] != 100).all() and (y[4:] == 100).all() and (y[:, 4:] == 100).all()
    assert (u[:2, :2] != 128).all() and (u[2:] == 128).all()


def test_nothing_painted_changes_nothing() -> None:
    y = np.arange(64, dtype=np.uint8).reshape(8, 8)
    u = np.full((4, 4), 90, np.uint8)
    v = np.full((4, 4), 160, np.uint8)
    paint_mask_yuv(y, u, v, np.zeros((8, 8), np.int64))
    assert (y == np.arange(64).reshape(8, 8)).all() and (u == 90).all() and (v == 160).all()
