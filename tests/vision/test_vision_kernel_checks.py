"""What the vision kernels (vision/_kernels.c) check on their own, and the regressions
fuzz/fuzz_vision.py found: each test fails on the code before its fix."""

from __future__ import annotations

import numpy as np
import pytest

import copyless as cl
from copyless.vision import Letterbox, _kernels, _text, classify_preprocess, text_boxes


def unaligned(values: np.ndarray) -> np.ndarray:
    """The same float32 values over raw bytes one byte into their allocation."""
    raw = np.zeros(values.nbytes + 1, np.uint8)
    raw[1:] = values.view(np.uint8).reshape(-1)
    view = raw[1:].view(np.float32).reshape(values.shape)
    assert not view.flags.aligned
    return view


def test_an_unaligned_probability_map_is_labelled_like_an_aligned_one() -> None:
    # fuzz_vision finding: numpy exports an unaligned float32 array as format "=f", which
    # the kernel refused ("must be a 2-D float32 array"); it now reads through memcpy.
    prob = np.zeros((1, 1, 12, 16), np.float32)
    prob[0, 0, 2:5, 3:9] = 0.9
    prob[0, 0, 8:11, 1:4] = 0.8
    canvas = Letterbox(1.0, 0, 0, 16, 12, 16)
    assert text_boxes(unaligned(prob), canvas) == text_boxes(prob, canvas)
    assert len(text_boxes(prob, canvas)) == 2


def test_an_unaligned_float32_destination_gets_the_same_pixels() -> None:
    # fuzz_vision finding: the same "=f" refusal for a float32 NCHW destination over bytes.
    image = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    info = cl.NpuTensorInfo("x", cl.DataType.FLOAT32, cl.TensorDirection.INPUT,
                            cl.TensorType.CPU, cl.MemoryLayout.NCHW, (1, 3, 16, 16))  # fmt: skip
    aligned = np.zeros(info.shape, np.float32)
    raw = np.zeros(info.size_in_bytes + 1, np.uint8)
    classify_preprocess(image, (aligned, info), resize_short=20, crop=16)
    classify_preprocess(image, (raw[1:], info), resize_short=20, crop=16)
    np.testing.assert_array_equal(raw[1:].view(np.float32).reshape(info.shape), aligned)


@pytest.mark.parametrize("fill", [float("nan"), -1.0, 256.0, float("inf")])
def test_fill_outside_pixel_values_is_refused_for_every_destination(fill: float) -> None:
    # fuzz_vision finding: a float32 destination took NaN (and anything) and wrote 255.
    src = np.zeros((4, 4, 3), np.uint8)
    for dst in (np.zeros((4, 4, 3), np.float32), np.zeros((4, 4, 4), np.uint8)):
        with pytest.raises(ValueError, match="fill"):
            _kernels.resample(src, dst, (0.0, 0.0, 4.0, 4.0), (0, 0, 2, 2), fill, False)


@pytest.mark.parametrize(
    "rect", [(2**63 - 1, 0, 1, 1), (0, 2**63 - 1, 1, 1), (1, 0, 2**63 - 1, 1), (-1, 0, 1, 1)]
)
def test_a_placement_rect_that_overflows_is_refused(rect: tuple[int, int, int, int]) -> None:
    # fuzz_vision finding (UBSan): ox + ow overflowed, wrapped negative and passed the
    # bounds check; the kernel then wrote at x = -1.
    src = np.zeros((4, 4, 3), np.uint8)
    dst = np.zeros((4, 4, 4), np.uint8)
    with pytest.raises(ValueError, match="rect"):
        _kernels.resample(src, dst, (0.0, 0.0, 4.0, 4.0), rect, 0.0, False)


def test_boxes_and_buffers_the_kernel_refuses() -> None:
    src = np.zeros((4, 4, 3), np.uint8)
    dst = np.zeros((4, 4, 4), np.uint8)
    for box in [(0.0, 0.0, 5.0, 4.0), (float("nan"), 0.0, 4.0, 4.0), (2.0, 0.0, 2.0, 4.0)]:
        with pytest.raises(ValueError, match="box"):
            _kernels.resample(src, dst, box, (0, 0, 4, 4), 0.0, False)
    with pytest.raises(ValueError, match="destination"):
        _kernels.resample(src, dst[..., :2], (0.0, 0.0, 4.0, 4.0), (0, 0, 4, 4), 0.0, False)
    with pytest.raises(ValueError, match="2-D float32"):
        _text.components(np.zeros((3, 3), np.float64), 0.5)
