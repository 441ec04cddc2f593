"""softmax_topk (float and int8 outputs), DB text boxes on synthetic maps, draw_boxes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

import copyless as cl
from copyless.vision import Box, Letterbox, draw_boxes, softmax_topk, text_boxes


def output_tensor(array: npt.NDArray[np.generic]) -> cl.NpuTensor:
    return cl.NpuTensor.from_numpy(array, name="logits", direction=cl.TensorDirection.OUTPUT)


# -- softmax_topk ---------------------------------------------------------------------------
def test_softmax_topk_on_known_logits() -> None:
    logits = [1.0, 3.0, 0.5, 3.0, -2.0, 7.0]
    total = sum(math.exp(v) for v in logits)
    tensor = output_tensor(np.array([logits], np.float32))
    top = softmax_topk(tensor, k=3)
    assert [i for i, _ in top] == [5, 1, 3]  # ties keep the lower class id first
    for class_id, prob in top:
        assert prob == pytest.approx(math.exp(logits[class_id]) / total, rel=1e-6)
    everything = softmax_topk(tensor, k=10)  # k larger than the classes: all of them
    assert len(everything) == 6
    assert sum(p for _, p in everything) == pytest.approx(1.0, rel=1e-6)


def test_softmax_topk_reads_the_tensor_memory_in_place() -> None:
    array = np.zeros((1, 1000), np.float32)
    tensor = output_tensor(array)
    array[0, 285] = 9.0  # the engine writes the output buffer after the tensor was made
    assert softmax_topk(tensor, k=1)[0][0] == 285
    array[0, 967] = 12.0
    assert softmax_topk(tensor, k=1)[0][0] == 967


def test_softmax_topk_batch_and_spatial_dims() -> None:
    logits = np.random.default_rng(1).normal(size=(2, 1000, 1, 1)).astype(np.float32)
    logits[1, 42] = 50.0
    top = softmax_topk(logits, k=2, batch_index=1)
    assert top[0][0] == 42 and top[0][1] > 0.99
    with pytest.raises(IndexError):
        softmax_topk(logits, batch_index=2)


def test_softmax_topk_dequantizes_int8() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 2.0, size=(1, 1000)).astype(np.float32)
    quant = cl.QuantParameters(scale=0.05, zero_point=-10)
    q = np.clip(np.rint(logits / quant.scale) + quant.zero_point, -128, 127).astype(np.int8)
    dequantized = (q.astype(np.float32) - quant.zero_point) * quant.scale
    expected = softmax_topk(dequantized, k=5)
    got = softmax_topk(output_tensor(q), k=5, quant=quant)
    assert [i for i, _ in got] == [i for i, _ in expected]
    for (_, p), (_, e) in zip(got, expected, strict=True):
        assert p == pytest.approx(e, rel=1e-5)
    # and it is the dequantized ranking, not the raw int8 one with a wrong zero point
    assert got[0][0] == int(np.argmax(logits))
    with pytest.raises(ValueError, match="QuantParameters"):
        softmax_topk(q)


def test_softmax_topk_float16_and_bad_k() -> None:
    logits = np.zeros((1, 10), np.float16)
    logits[0, 7] = 4.0
    assert softmax_topk(logits, k=1)[0][0] == 7
    with pytest.raises(ValueError, match="k must"):
        softmax_topk(logits, k=0)


# -- text_boxes -----------------------------------------------------------------------------
def unclipped(x0: int, y0: int, x1: int, y1: int) -> tuple[float, float, float, float]:
    w, h = x1 - x0, y1 - y0
    d = w * h * 1.5 / (2 * (w + h))
    return x0 - d, y0 - d, x1 + d, y1 + d


RECTS = {  # canvas rectangles (x0, y0, x1, y1) and their probability
    (100, 120, 300, 140): 0.9,
    (400, 300, 600, 330): 0.7,
    (50, 400, 90, 480): 0.8,
}


@pytest.mark.parametrize("map_scale", [1, 2])
def test_text_boxes_finds_three_rectangles(map_scale: int) -> None:
    """The map may be coarser than the canvas (map_scale 2: a 320x320 map of a 640 canvas)."""
    size = 640 // map_scale
    prob = np.full((1, 1, size, size), 0.1, np.float32)  # background below the threshold
    for (x0, y0, x1, y1), p in RECTS.items():
        prob[0, 0, y0 // map_scale : y1 // map_scale, x0 // map_scale : x1 // map_scale] = p
    prob[0, 0, 5:15, 5:30] = 0.4  # above threshold, mean below box_threshold: dropped
    prob[0, 0, 250:252, 250:252] = 0.95  # 2x2 speck: below min_size, dropped
    box = Letterbox(scale=0.5, pad_x=0, pad_y=80, width=1280, height=960, size=640)
    boxes = text_boxes(prob, box, threshold=0.3, box_threshold=0.5, min_size=3)
    assert len(boxes) == 3
    expected_order = [(100, 120, 300, 140), (400, 300, 600, 330), (50, 400, 90, 480)]
    for found, rect in zip(boxes, expected_order, strict=True):
        mx = [v // map_scale for v in rect]
        cx0, cy0, cx1, cy1 = (v * map_scale for v in unclipped(*mx))
        expected = (cx0 / 0.5, (cy0 - 80) / 0.5, cx1 / 0.5, (cy1 - 80) / 0.5)
        assert (found.x0, found.y0, found.x1, found.y1) == pytest.approx(expected, abs=1e-3)
        assert found.score == pytest.approx(RECTS[rect], abs=1e-6)
        assert found.width > 0 and found.height > 0


def test_text_boxes_clips_to_the_image() -> None:
    prob = np.zeros((1, 1, 64, 64), np.float32)
    prob[0, 0, 0:10, 0:40] = 1.0  # touches the canvas corner: unclip goes past it
    box = Letterbox(scale=1.0, pad_x=0, pad_y=0, width=50, height=64, size=64)
    (found,) = text_boxes(prob, box)
    assert (found.x0, found.y0) == (0.0, 0.0)
    assert found.x1 == pytest.approx(40 + 40 * 10 * 1.5 / 100)
    # a component entirely in the padding maps to nothing
    prob[:] = 0.0
    prob[0, 0, 20:30, 55:63] = 1.0
    assert text_boxes(prob, box) == []


def test_components_are_8_connected_and_merge_u_shapes() -> None:
    prob = np.zeros((40, 40), np.float32)
    prob[5:10, 5:10] = 1.0
    prob[10:15, 10:15] = 1.0  # touches the first square at one corner: same component
    prob[20:35, 5:8] = 1.0  # a U: two arms first met in separate rows, joined at the bottom
    prob[20:35, 20:23] = 1.0
    prob[32:35, 5:23] = 1.0
    prob[20:30, 30:38] = 1.0  # separated from the U by a gap: its own component
    box = Letterbox(scale=1.0, pad_x=0, pad_y=0, width=40, height=40, size=40)
    found = text_boxes(prob, box, unclip_ratio=0.0)
    assert [(b.x0, b.y0, b.x1, b.y1) for b in found] == [
        (5, 5, 15, 15),
        (5, 20, 23, 35),
        (30, 20, 38, 30),
    ]


def test_text_boxes_reads_an_npu_tensor_and_rejects_bad_shapes() -> None:
    array = np.zeros((1, 1, 32, 32), np.float32)
    tensor = output_tensor(array)
    array[0, 0, 4:12, 4:28] = 0.8
    box = Letterbox(scale=1.0, pad_x=0, pad_y=0, width=32, height=32, size=32)
    assert len(text_boxes(tensor, box)) == 1
    with pytest.raises(ValueError, match=r"\[N, 1, H, W\]"):
        text_boxes(np.zeros((1, 2, 8, 8), np.float32), box)


# -- draw_boxes -----------------------------------------------------------------------------
def test_draw_boxes_writes_a_png(tmp_path: Path) -> None:
    image = np.zeros((100, 200, 3), np.uint8)
    out = draw_boxes(image, [Box(10, 20, 60, 50, 0.9)], tmp_path / "boxes.png")
    with Image.open(out) as png:
        assert png.format == "PNG"
        drawn = np.asarray(png.convert("RGB"))
    assert drawn.shape == (100, 200, 3)
    assert tuple(drawn[30, 10]) == (255, 0, 0)  # left edge
    assert tuple(drawn[49, 30]) == (255, 0, 0)  # bottom edge (y1 exclusive)
    assert tuple(drawn[35, 30]) == (0, 0, 0)  # inside stays
    assert not image.any()  # the caller's image is untouched
