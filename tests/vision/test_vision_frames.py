"""vision.classify_frame: a 4:2:0 frame's planes into an image tensor, bit for bit the pixels
of the reference loop (PyAV's ``to_ndarray(format="rgb24")``, then PIL's bilinear resize and
crop), on real H.264 frames and on random planes of any size, matrix and range."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import copyless as cl
from copyless.vision import ColourFormat, classify_frame, swscale_coefficients
from copyless.vision._frames import pil_vertical_first
from copyless.vision._video import plane_array
from video_helpers import make_clip

Array = npt.NDArray[np.uint8]


def reference(frame: av.VideoFrame, short: int = 256, crop: int = 224) -> Array:
    """torchvision's Resize(short) + CenterCrop(crop) on PyAV's rgb24 frame."""
    image = Image.fromarray(frame.to_ndarray(format="rgb24"))
    w, h = image.size
    size = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
    left, top = round((size[0] - crop) / 2), round((size[1] - crop) / 2)
    return np.asarray(image.resize(size, Image.BILINEAR).crop((left, top, left + crop, top + crop)))


def planes_of(frame: av.VideoFrame) -> tuple[Array, Array, Array]:
    """The frame's Y, U, V planes as views of the decoder's memory (lines as they lie)."""
    h, w = frame.height, frame.width
    ch, cw = (h + 1) // 2, (w + 1) // 2
    y, _ = plane_array(frame.planes[0], h, w, 1, padded=True)
    u, _ = plane_array(frame.planes[1], ch, cw, 1, padded=True)
    v, _ = plane_array(frame.planes[2], ch, cw, 1, padded=True)
    return y[:, :w], u[:, :cw], v[:, :cw]


def rgbx(crop: int = 224) -> tuple[Array, cl.NpuTensorInfo]:
    info = cl.NpuTensorInfo("x", cl.DataType.UINT8, cl.TensorDirection.INPUT, cl.TensorType.HW,
                            cl.MemoryLayout.NHWC4, (1, crop, crop, 4))  # fmt: skip
    return np.full(info.shape, 7, np.uint8), info


@pytest.fixture(scope="module", params=[(480, 640), (640, 480), (360, 202)], ids=str)
def frames(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list:
    """Decoded H.264 frames of real photos: landscape, portrait (PIL resizes it vertically
    first), a small one (upscaled)."""
    height, width = request.param
    clip = make_clip(tmp_path_factory.mktemp("frames") / "clip.mp4", height, width, 2)
    with av.open(str(clip)) as container:
        return list(container.decode(video=0))


def test_h264_frames_are_the_reference_loops_pixels(frames: list) -> None:
    for frame in frames:
        want = reference(frame)
        y, u, v = planes_of(frame)
        array, info = rgbx()
        classify_frame((y, u, v), (array, info))
        np.testing.assert_array_equal(array[0, ..., :3], want)
        assert not array[0, ..., 3].any()
        # NV12: the interleaved chroma read in place
        array[...] = 7
        classify_frame((y, np.stack([u, v], axis=-1)), (array, info))
        np.testing.assert_array_equal(array[0, ..., :3], want)


def test_tall_frames_take_pillows_pass_order() -> None:
    """Pillow 13 resizes vertically first where a frame loses more than twice as many rows
    as columns (a frame over 2:1 tall, resized to a short side it exceeds): each pass
    rounds, so only the same order gives the same pixels."""
    frame = make_frame_from_photo(500, 200)
    assert pil_vertical_first(200, 500, 100, 250) == (int(Image.__version__.split(".")[0]) >= 13)
    assert not pil_vertical_first(640, 480, 341, 256)
    assert not pil_vertical_first(480, 640, 256, 341)
    array, info = rgbx(96)
    classify_frame(planes_of(frame), (array, info), resize_short=100, crop=96)
    np.testing.assert_array_equal(array[0, ..., :3], reference(frame, 100, 96))


@pytest.mark.parametrize("fmt", [ColourFormat.RGBP_FLOAT, ColourFormat.RGBP, ColourFormat.BGRX,
                                 ColourFormat.RGBX_FP16])  # fmt: skip
def test_every_image_format_gets_the_same_levels(frames: list, fmt: ColourFormat) -> None:
    frame = frames[0]
    want = reference(frame, short=40, crop=32)
    info = cl.NpuTensorInfo("x", fmt.data_type, cl.TensorDirection.INPUT, cl.TensorType.HW,
                            fmt.memory_layout, fmt.image_shape(2, 32, 32))  # fmt: skip
    array = np.zeros(info.shape, info.numpy_dtype)
    classify_frame(planes_of(frame), (array, info), colour_format=fmt, resize_short=40, crop=32,
                   batch_index=1)  # fmt: skip
    got = array[1].transpose(1, 2, 0) if fmt.planar else array[1, ..., :3]
    if fmt is ColourFormat.BGRX:
        got = got[..., ::-1]
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    assert not array[0].any()  # the other image is untouched


def random_frame(rng: np.random.Generator, width: int, height: int, matrix: int,
                 colour_range: int) -> av.VideoFrame:  # fmt: skip
    frame = av.VideoFrame(width, height, "yuv420p")
    for plane in frame.planes:
        plane.update(rng.integers(0, 256, np.frombuffer(plane, np.uint8).size, np.uint8).tobytes())
    frame.colorspace, frame.color_range = matrix, colour_range
    return frame


@settings(max_examples=60, deadline=None)
@given(
    width=st.integers(1, 160),
    rows=st.integers(1, 80),
    short=st.integers(1, 200),
    crop_part=st.floats(0.05, 1.0),
    bt709=st.booleans(),
    full=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_planes_of_any_even_height_match_swscale_and_pil(
    width: int, rows: int, short: int, crop_part: float, bt709: bool, full: bool, seed: int
) -> None:
    """Noise planes (every level, every chroma), any geometry: swscale's yuv2rgb fast path
    (even heights) and PIL's taps, both pass orders, up- and downscaling."""
    height = 2 * rows
    crop = max(1, int(short * crop_part))
    frame = random_frame(np.random.default_rng(seed), width, height, 1 if bt709 else 5,
                         2 if full else 1)  # fmt: skip
    want = reference(frame, short, crop)
    array, info = rgbx(crop)
    classify_frame(planes_of(frame), (array, info), yuv_matrix="bt709" if bt709 else "bt601",
                   yuv_range="full" if full else "limited", resize_short=short,
                   crop=crop)  # fmt: skip
    np.testing.assert_array_equal(array[0, ..., :3], want)


def test_odd_heights_are_close() -> None:
    # swscale converts odd heights through its general scaler (chroma interpolated, not
    # repeated): levels apart at colour edges, below one on average
    frame = make_frame_from_photo(97, 130)
    want = reference(frame, 64, 56).astype(int)
    array, info = rgbx(56)
    classify_frame(planes_of(frame), (array, info), resize_short=64, crop=56)
    assert np.abs(array[0, ..., :3].astype(int) - want).mean() < 1.5


def make_frame_from_photo(height: int, width: int) -> av.VideoFrame:
    from video_helpers import scene

    rgb = av.VideoFrame.from_ndarray(scene("chelsea", height - height % 2, width), format="rgb24")
    small = rgb.reformat(format="yuv420p")
    frame = av.VideoFrame(width, height, "yuv420p")
    for i, plane in enumerate(frame.planes):  # the photo's planes, the last row repeated
        src = np.frombuffer(small.planes[i], np.uint8).reshape(-1, small.planes[i].line_size)
        dst = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size).copy()
        rows = min(dst.shape[0], src.shape[0])
        cols = min(dst.shape[1], src.shape[1])
        dst[:rows, :cols] = src[:rows, :cols]
        dst[rows:, :cols] = src[rows - 1, :cols]
        plane.update(dst.tobytes())
    return frame


def test_swscale_coefficients_are_ffmpegs() -> None:
    # ff_yuv2rgb_c_init_tables with the default contrast/saturation/brightness
    assert swscale_coefficients() == (9539, 13075, 16525, -6660, -3209, 128)
    assert swscale_coefficients("bt709", "full") == (8192, 12901, 15201, -3835, -1535, 0)
    with pytest.raises(ValueError, match="yuv_matrix"):
        swscale_coefficients("bt2020")
    with pytest.raises(ValueError, match="yuv_range"):
        swscale_coefficients("bt601", "tv")


def test_planes_that_do_not_make_a_frame_are_refused() -> None:
    array, info = rgbx(8)
    y = np.zeros((16, 20), np.uint8)
    c = np.zeros((8, 10), np.uint8)
    classify_frame((y, c, c), (array, info), resize_short=10, crop=8)
    bad = [
        ((y, c), "UV plane"),
        ((y, c, c[:, :9]), "U and V planes"),
        ((y.astype(np.int16), c, c), "uint8"),
        ((y[None], c, c), "Y plane"),
        ((y,), "planes must be"),
        ((np.zeros((16, 0), np.uint8), c, c), "Y plane"),
    ]
    for planes, match in bad:
        with pytest.raises(ValueError, match=match):
            classify_frame(planes, (array, info), resize_short=10, crop=8)
    with pytest.raises(ValueError, match="crop"):
        classify_frame((y, c, c), (array, info), resize_short=4, crop=8)
    with pytest.raises(cl.LayoutError):
        classify_frame((y, c, c), (array, info), resize_short=12, crop=10)


def test_strided_luma_is_copied_and_reversed_chroma_read(frames: list) -> None:
    frame = frames[0]
    y, u, v = planes_of(frame)
    want = reference(frame)
    array, info = rgbx()
    wide = np.zeros((y.shape[0], y.shape[1] * 2), np.uint8)
    wide[:, ::2] = y  # a luma view of pixel stride 2: the kernel reads packed rows
    classify_frame((wide[:, ::2], u, v), (array, info))
    np.testing.assert_array_equal(array[0, ..., :3], want)


def test_the_kernel_checks_what_python_would(tmp_path: Path) -> None:
    """The C checks alone (fuzz_vision calls the kernel directly)."""
    from copyless.vision import _kernels

    y = np.zeros((4, 6), np.uint8)
    c = np.zeros((2, 3), np.uint8)
    dst = np.zeros((2, 2, 4), np.uint8)
    coeffs = swscale_coefficients()
    _kernels.yuv_resize(y, c, c, dst, (6, 4), (4, 2), coeffs, False, False)
    cases = [
        ((y, c, c, dst, (6, 4), (5, 2), coeffs), "inside the resized"),
        ((y, c, c, dst, (1, 4), (0, 0), coeffs), "inside the resized"),
        ((y, c, c, dst, (6, 4), (-1, 0), coeffs), "inside the resized"),
        ((y, c, c, dst, (2**17, 4), (0, 0), coeffs), "inside the resized"),
        ((y, c, c, dst, (6, 4), (0, 0), (1, 2, 3, 4, 5, 2**15)), "int16"),
        ((y, c[:1], c, dst, (6, 4), (0, 0), coeffs), "U plane"),
        ((y, c, c[:, ::-1], dst, (6, 4), (0, 0), coeffs), "positive strides"),
        ((y[:, ::2], c, c[:, :2], dst, (6, 4), (0, 0), coeffs), "packed pixels"),
        ((y, c, c, dst[..., :2], (6, 4), (0, 0), coeffs), "destination"),
        ((y.astype(np.float32), c, c, dst, (6, 4), (0, 0), coeffs), "luma plane"),
    ]
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            _kernels.yuv_resize(*args, False, False)
    with pytest.raises(ValueError, match="bf16"):
        _kernels.yuv_resize(y, c, c, dst, (6, 4), (0, 0), coeffs, False, False, True)
