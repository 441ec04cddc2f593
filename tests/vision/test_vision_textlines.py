"""Text lines between a DB detector and a recogniser: text_quads (DB postprocess without
OpenCV) against PP-OCR's own DBPostProcess (OpenCV + pyclipper), line_crops + warp_lines
against an explicit crop-and-resize, order_lines, place_page."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from PIL import Image, ImageDraw

import copyless as cl
from copyless.vision import line_crops, order_lines, place_page, text_quads, warp_lines


def _blob_map(
    shapes: list[list[tuple[float, float]]], size: tuple[int, int] = (240, 360)
) -> np.ndarray:
    """A probability map: 0.05 background, 0.9 inside each polygon, a soft 0.4 rim."""
    canvas = Image.new("F", (size[1], size[0]), 0.05)
    draw = ImageDraw.Draw(canvas)
    for poly in shapes:
        draw.polygon(poly, fill=0.9, outline=0.4)
    return np.asarray(canvas, dtype=np.float32).copy()


def _rotated(cx: float, cy: float, w: float, h: float, degrees: float) -> list[tuple[float, float]]:
    a = math.radians(degrees)
    u, v = (math.cos(a), math.sin(a)), (-math.sin(a), math.cos(a))
    return [(cx + sx * w / 2 * u[0] + sy * h / 2 * v[0], cy + sx * w / 2 * u[1] + sy * h / 2 * v[1])
            for sx, sy in ((-1, -1), (1, -1), (1, 1), (-1, 1))]  # fmt: skip


def _pp_ocr_boxes(prob: np.ndarray) -> np.ndarray:
    from rapidocr.ch_ppocr_det.utils import DBPostProcess

    post = DBPostProcess(thresh=0.3, box_thresh=0.5, unclip_ratio=1.6, use_dilation=True)
    boxes, _ = post(prob[None, None], prob.shape)
    return np.asarray(boxes, dtype=np.float64)


def test_quads_match_pp_ocr_db_postprocess() -> None:
    pytest.importorskip("rapidocr")
    prob = _blob_map([
        _rotated(120, 50, 180, 24, 0), _rotated(180, 120, 200, 30, 12),
        _rotated(90, 200, 120, 20, -25), [(250, 180), (330, 170), (340, 220), (260, 225)],
    ])  # fmt: skip
    quads, scores = text_quads(prob)
    ours = quads[np.argsort(quads[:, 0, 1])]
    ours[..., 0] = np.clip(np.round(ours[..., 0]), 0, prob.shape[1])
    ours[..., 1] = np.clip(np.round(ours[..., 1]), 0, prob.shape[0])
    theirs = _pp_ocr_boxes(prob)
    theirs = theirs[np.argsort(theirs[:, 0, 1])]
    assert ours.shape == theirs.shape == (4, 4, 2)
    assert np.abs(ours - theirs).max() <= 2.0
    assert np.all((scores > 0.5) & (scores < 0.95))


def test_quad_follows_a_rotated_line() -> None:
    prob = _blob_map([_rotated(180, 120, 200, 30, 20)])
    (quad,), _ = text_quads(prob)
    top = quad[1] - quad[0]
    assert abs(math.degrees(math.atan2(top[1], top[0])) - 20) < 1.5
    # unclip grows each side by area * 1.6 / perimeter (~21 px for 200 x 30); the drawn rim
    # and the 2x2 dilation add a few pixels to the blob first
    grow = 200 * 30 * 1.6 / (2 * 230)
    assert 0 <= np.linalg.norm(top) - (200 + 2 * grow) < 8
    assert 0 <= np.linalg.norm(quad[3] - quad[0]) - (30 + 2 * grow) < 8


def test_no_text_gives_no_quads() -> None:
    quads, scores = text_quads(np.zeros((64, 64), dtype=np.float32))
    assert quads.shape == (0, 4, 2) and scores.shape == (0,)
    speck, _ = text_quads(_blob_map([[(10, 10), (11, 10), (11, 11)]], (64, 64)))
    assert len(speck) == 0  # smaller than min_size


def test_map_is_read_in_place_from_a_strided_view() -> None:
    prob = _blob_map([_rotated(120, 50, 180, 24, 0)])
    batch = np.zeros((1, 1, *prob.shape), dtype=np.float32)
    batch[0, 0] = prob
    view = batch[0, 0]
    assert np.shares_memory(view, batch)
    np.testing.assert_array_equal(text_quads(view)[0], text_quads(prob)[0])


def test_warp_of_an_axis_aligned_line_is_a_bilinear_resize() -> None:
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, (80, 200, 3), dtype=np.uint8)
    quad = np.array([[[20.0, 10.0], [180.0, 10.0], [180.0, 42.0], [20.0, 42.0]]])
    crops = line_crops(quad, height=48)
    assert crops.widths.tolist() == [240]  # ceil(48 * 160 / 32)
    batch = np.full((2, 3, 48, 320), 7.0, dtype=np.float32)
    warp_lines(image, batch, crops.homographies, crops.widths, np.array([1], dtype=np.int32))
    # the reference: bilinear resize of the 160 x 32 crop, pixel centres aligned
    ys = (np.arange(48) + 0.5) * 32 / 48 - 0.5 + 10
    xs = (np.arange(240) + 0.5) * 160 / 240 - 0.5 + 20
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    img = image.astype(np.float64)
    top = img[y0][:, x0] * (1 - fx) + img[y0][:, x0 + 1] * fx
    bottom = img[y0 + 1][:, x0] * (1 - fx) + img[y0 + 1][:, x0 + 1] * fx
    expected = ((top * (1 - fy) + bottom * fy) - 127.5) / 127.5
    np.testing.assert_allclose(batch[1, :, :, :240], expected.transpose(2, 0, 1), atol=1e-3)
    assert np.all(batch[1, :, :, 240:] == 0.0)  # padding zeroed
    assert np.all(batch[0] == 7.0)  # other slots untouched


def test_tall_lines_are_turned_and_the_classifier_turn_flips_them() -> None:
    image = np.zeros((100, 100, 3), dtype=np.uint8)
    image[10:90, 40:50] = np.linspace(0, 255, 80, dtype=np.uint8)[:, None, None]  # dark top
    quad = np.array([[[40.0, 10.0], [50.0, 10.0], [50.0, 90.0], [40.0, 90.0]]])
    batch = np.zeros((1, 3, 48, 480), dtype=np.float32)
    crops = line_crops(quad, height=48)
    warp_lines(image, batch, crops.homographies, crops.widths, np.zeros(1, dtype=np.int32))
    row = batch[0, 0, 24, : crops.widths[0]]
    # turned counter-clockwise as np.rot90: the dark top is now on the left
    assert crops.widths[0] == 384 and row[5] < row[-5]
    turned = line_crops(quad, height=48, turn=np.array([True]))
    warp_lines(image, batch, turned.homographies, turned.widths, np.zeros(1, dtype=np.int32))
    assert batch[0, 0, 24, 5] > batch[0, 0, 24, 378]


def test_warp_checks_its_arguments() -> None:
    image = np.zeros((10, 10, 3), dtype=np.uint8)
    crops = line_crops(np.array([[[0.0, 0.0], [9.0, 0.0], [9.0, 5.0], [0.0, 5.0]]]))
    with pytest.raises(ValueError, match="C-contiguous float32"):
        warp_lines(image, np.zeros((1, 3, 48, 64)), crops.homographies, crops.widths,
                   np.zeros(1, dtype=np.int32))  # fmt: skip
    with pytest.raises(ValueError, match="outside the tensor"):
        warp_lines(image, np.zeros((1, 3, 48, 64), np.float32), crops.homographies,
                   crops.widths, np.array([3], dtype=np.int32))  # fmt: skip


def test_reading_order_groups_rows_then_goes_left_to_right() -> None:
    def quad(x: float, y: float) -> list[list[float]]:
        return [[x, y], [x + 50, y], [x + 50, y + 20], [x, y + 20]]

    quads = np.array([quad(300, 104), quad(10, 100), quad(10, 40), quad(150, 98)])
    assert order_lines(quads).tolist() == [2, 1, 3, 0]  # tops 98..104: one row
    assert order_lines(np.zeros((0, 4, 2))).tolist() == []


def test_place_page_resizes_into_a_rect_black_around() -> None:
    info = cl.NpuTensorInfo("x", cl.DataType.UINT8, cl.TensorDirection.INPUT, cl.TensorType.HW,
                            cl.MemoryLayout.NHWC4, (1, 64, 32, 4))  # fmt: skip
    buffer = np.full(info.size, 99, dtype=np.uint8)
    tensor = cl.NpuTensor(dataclasses.replace(info, tensor_type=cl.TensorType.CPU), buffer,
                          cl.MemoryType.USER_POINTER_NON_CMA)  # fmt: skip
    place_page(np.full((20, 10, 3), 200, dtype=np.uint8), tensor, (0, 16, 32, 32))
    pixels = buffer.reshape(64, 32, 4)
    assert np.all(pixels[16:48, :, :3] == 200) and np.all(pixels[:16] == 0)
    assert np.all(pixels[48:] == 0) and np.all(pixels[..., 3] == 0)
