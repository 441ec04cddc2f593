"""Fused preprocessing: equals a slow Pillow/numpy reference, and lands in the tensor's memory."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import copyless as cl
from copyless.vision import (
    ColourFormat,
    Letterbox,
    classify_preprocess,
    colour_format_for,
    letterbox,
    stretch,
)

MakeTensor = Callable[..., tuple[cl.NpuTensor, npt.NDArray[Any]]]


def reference_classify(
    image: npt.NDArray[np.uint8], resize_short: int = 256, crop: int = 224
) -> npt.NDArray[np.int16]:
    """torchvision-style Resize(short) + CenterCrop with Pillow's antialiased bilinear."""
    h, w = image.shape[:2]
    if w <= h:
        size = (resize_short, int(resize_short * h / w))
    else:
        size = (int(resize_short * w / h), resize_short)
    resized = np.asarray(Image.fromarray(image).resize(size, Image.BILINEAR))
    top = round((size[1] - crop) / 2.0)
    left = round((size[0] - crop) / 2.0)
    return resized[top : top + crop, left : left + crop].astype(np.int16)


def reference_letterbox(
    image: npt.NDArray[np.uint8], size: int, fill: int
) -> tuple[npt.NDArray[np.int16], int, int]:
    h, w = image.shape[:2]
    scale = size / max(h, w)
    nw, nh = round(w * scale), round(h * scale)
    canvas = np.full((size, size, 3), fill, np.int16)
    px, py = (size - nw) // 2, (size - nh) // 2
    canvas[py : py + nh, px : px + nw] = np.asarray(
        Image.fromarray(image).resize((nw, nh), Image.BILINEAR)
    )
    return canvas, px, py


def as_planes(array: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    """[1, 3, H, W] float -> [H, W, 3] for comparison."""
    return np.asarray(array[0].transpose(1, 2, 0), np.float32)


@pytest.mark.parametrize("orientation", ["landscape", "portrait"])
def test_classify_rgbx_matches_reference(
    photo: npt.NDArray[np.uint8], image_tensor: MakeTensor, orientation: str
) -> None:
    image = photo if orientation == "landscape" else np.ascontiguousarray(photo.transpose(1, 0, 2))
    tensor, array = image_tensor("rgbx")
    classify_preprocess(image, tensor, colour_format=ColourFormat.RGBX)
    diff = np.abs(array[0, :, :, :3].astype(np.int16) - reference_classify(image))
    assert diff.max() <= 2
    assert diff.mean() < 0.5
    assert (array[0, :, :, 3] == 0).all()  # the X byte


def test_classify_float_planar_matches_reference(
    photo: npt.NDArray[np.uint8], image_tensor: MakeTensor
) -> None:
    tensor, array = image_tensor("float")
    classify_preprocess(photo, tensor)  # format from the info: RGBP_FLOAT
    planes = as_planes(array)
    assert planes.min() >= 0.0 and planes.max() <= 255.0  # pixel units, not normalised
    assert np.abs(planes - reference_classify(photo)).max() <= 2.0
    # the planes are R, G, B in that order: plane 0 of the warm photo is the reddest
    assert array[0, 0].mean() > array[0, 2].mean() + 10


def test_float_and_rgbx_agree(photo: npt.NDArray[np.uint8], image_tensor: MakeTensor) -> None:
    rgbx, packed = image_tensor("rgbx")
    planar, floats = image_tensor("float")
    classify_preprocess(photo, rgbx)
    classify_preprocess(photo, planar)
    np.testing.assert_array_equal(np.rint(as_planes(floats)), packed[0, :, :, :3])


def test_bgrx_swaps_red_and_blue(photo: npt.NDArray[np.uint8], image_tensor: MakeTensor) -> None:
    rgbx, rgb = image_tensor("rgbx")
    bgrx, bgr = image_tensor("rgbx")
    classify_preprocess(photo, rgbx)
    classify_preprocess(photo, bgrx, colour_format=ColourFormat.BGRX)
    np.testing.assert_array_equal(bgr[0, :, :, :3], rgb[0, :, :, 2::-1])
    assert (bgr[0, :, :, 3] == 0).all()


@pytest.mark.parametrize("kind", ["rgbx", "float"])
def test_writes_land_in_the_tensor_memory(
    photo: npt.NDArray[np.uint8], image_tensor: MakeTensor, kind: str
) -> None:
    tensor, array = image_tensor(kind)
    before = array.copy()
    view = tensor.numpy()
    assert np.shares_memory(view, array)
    classify_preprocess(photo, tensor)
    # the user's own buffer changed, at the address the tensor reports
    assert not np.array_equal(array, before)
    assert tensor.get_virtual_address() == array.__array_interface__["data"][0]
    assert np.array_equal(view, array)


def test_array_info_pair_and_bytearray_destinations(
    photo: npt.NDArray[np.uint8], image_tensor: MakeTensor
) -> None:
    tensor, expected = image_tensor("rgbx")
    classify_preprocess(photo, tensor)
    raw = bytearray(tensor.info.size_in_bytes)
    classify_preprocess(photo, (raw, tensor.info))
    assert bytes(raw) == expected.tobytes()
    flat = np.zeros(tensor.info.size_in_bytes, np.uint8)
    classify_preprocess(photo, (flat, tensor.info))
    np.testing.assert_array_equal(flat, expected.reshape(-1))


def test_batch_index_writes_only_that_image(
    photo: npt.NDArray[np.uint8], image_tensor: MakeTensor
) -> None:
    tensor, array = image_tensor("float", batch=3)
    classify_preprocess(photo, tensor, batch_index=1)
    assert (array[0] == -1.0).all() and (array[2] == -1.0).all()
    assert np.abs(as_planes(array[1:2]) - reference_classify(photo)).max() <= 2.0
    with pytest.raises(ValueError, match="batch_index"):
        classify_preprocess(photo, tensor, batch_index=3)


def test_format_mismatch_names_both_byte_sizes(
    photo: npt.NDArray[np.uint8], image_tensor: MakeTensor
) -> None:
    rgbx, _ = image_tensor("rgbx")
    with pytest.raises(ValueError, match=r"preprocess writes 602112 bytes.*holds 200704"):
        classify_preprocess(photo, rgbx, colour_format=ColourFormat.RGBP_FLOAT)
    planar, _ = image_tensor("float")
    with pytest.raises(ValueError, match=r"preprocess writes 200704 bytes.*holds 602112"):
        classify_preprocess(photo, planar, colour_format=ColourFormat.RGBX)
    with pytest.raises(cl.LayoutError, match=r"writes 262144 bytes.*holds 200704"):
        classify_preprocess(photo, rgbx, resize_short=300, crop=256)


def test_colour_format_for(make_info: Callable[..., cl.NpuTensorInfo]) -> None:
    nhwc4 = make_info((1, 224, 224, 4), cl.DataType.UINT8, memory_layout=cl.MemoryLayout.NHWC4)
    assert colour_format_for(nhwc4) is ColourFormat.RGBX
    assert colour_format_for(make_info((2, 3, 64, 64))) is ColourFormat.RGBP_FLOAT
    with pytest.raises(cl.LayoutError):
        colour_format_for(make_info((1, 1, 64, 64)))
    with pytest.raises(ValueError, match="no image input"):
        colour_format_for(make_info((1, 3, 64, 64), cl.DataType.INT8))


def test_read_only_destination_is_refused(
    photo: npt.NDArray[np.uint8], image_tensor: MakeTensor
) -> None:
    tensor, array = image_tensor("rgbx")
    frozen = array.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        classify_preprocess(photo, (frozen, tensor.info))


def test_strided_source_equals_contiguous(
    photo: npt.NDArray[np.uint8], image_tensor: MakeTensor
) -> None:
    mirrored = photo[:, ::-1]
    a, out_a = image_tensor("rgbx")
    b, out_b = image_tensor("rgbx")
    classify_preprocess(mirrored, a)
    classify_preprocess(np.ascontiguousarray(mirrored), b)
    np.testing.assert_array_equal(out_a, out_b)


@settings(max_examples=25, deadline=None)
@given(
    width=st.integers(8, 400),
    height=st.integers(8, 400),
    crop=st.integers(4, 64),
    extra=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_classify_matches_reference_on_random_images(
    width: int, height: int, crop: int, extra: int, seed: int
) -> None:
    """Up- and downscales of noise (the worst case for resampling) stay within 2 of Pillow."""
    image = np.random.default_rng(seed).integers(0, 256, (height, width, 3), np.uint8)
    out = np.zeros((1, crop, crop, 4), np.uint8)
    info = cl.NpuTensorInfo(
        "x", cl.DataType.UINT8, cl.TensorDirection.INPUT, cl.TensorType.HW,
        cl.MemoryLayout.NHWC4, out.shape,
    )
    classify_preprocess(image, (out, info), resize_short=crop + extra, crop=crop)
    reference = reference_classify(image, crop + extra, crop)
    assert np.abs(out[0, :, :, :3].astype(np.int16) - reference).max() <= 2


@pytest.mark.parametrize(
    "source_size", [(640, 480), (451, 300), (300, 451), (1280, 960), (640, 640)]
)
@pytest.mark.parametrize("kind", ["rgbx", "float"])
def test_letterbox_matches_reference(
    photo: npt.NDArray[np.uint8],
    image_tensor: MakeTensor,
    source_size: tuple[int, int],
    kind: str,
) -> None:
    image = np.asarray(Image.fromarray(photo).resize(source_size, Image.BILINEAR))
    tensor, array = image_tensor(kind, size=640)
    box = letterbox(image, tensor, size=640, fill=114)
    reference, px, py = reference_letterbox(image, 640, 114)
    pixels = array[0, :, :, :3] if kind == "rgbx" else as_planes(array)
    assert np.abs(pixels.astype(np.float32) - reference).max() <= 2
    assert (box.pad_x, box.pad_y) == (px, py)
    assert box.scale == pytest.approx(640 / max(source_size))
    assert (box.width, box.height, box.size) == (*source_size, 640)
    # the border is exactly the fill value, the X byte exactly 0
    if py:
        assert (pixels[:py] == 114).all() and (pixels[640 - py :] == 114).all()
    if px:
        assert (pixels[:, :px] == 114).all() and (pixels[:, 640 - px :] == 114).all()
    if kind == "rgbx":
        assert (array[0, :, :, 3] == 0).all()


@pytest.mark.parametrize("kind", ["rgbx", "float"])
def test_stretch_matches_reference(
    photo: npt.NDArray[np.uint8], image_tensor: MakeTensor, kind: str
) -> None:
    tensor, array = image_tensor(kind, size=96)
    stretch(photo, tensor)  # 640x480 -> 96x96: the aspect ratio is not kept
    want = np.asarray(Image.fromarray(photo).resize((96, 96), Image.BILINEAR), np.float32)
    got = array[0, :, :, :3] if kind == "rgbx" else as_planes(array)
    assert np.abs(got.astype(np.float32) - want).max() <= 2.0


def test_letterbox_maps_points_back_to_the_source(image_tensor: MakeTensor) -> None:
    image = np.zeros((600, 800, 3), np.uint8)
    image[100:140, 500:560] = 255  # a white block at x 500..560, y 100..140
    tensor, array = image_tensor("rgbx", size=320)
    box = letterbox(image, tensor, size=320, fill=0)
    assert box == Letterbox(scale=0.4, pad_x=0, pad_y=40, width=800, height=600, size=320)
    ys, xs = np.nonzero(array[0, :, :, 0] > 127)
    x0, y0 = box.to_source(xs.min(), ys.min())
    x1, y1 = box.to_source(xs.max() + 1, ys.max() + 1)
    assert (x0, y0, x1, y1) == pytest.approx((500, 100, 560, 140), abs=2.5)


def test_letterbox_rejects_bad_fill(photo: npt.NDArray[np.uint8], image_tensor: MakeTensor) -> None:
    tensor, _ = image_tensor("rgbx", size=640)
    with pytest.raises(ValueError, match="fill"):
        letterbox(photo, tensor, fill=300)


def test_bad_images_are_refused(image_tensor: MakeTensor) -> None:
    tensor, _ = image_tensor("rgbx")
    with pytest.raises(ValueError, match="uint8"):
        classify_preprocess(np.zeros((10, 10, 3), np.float32), tensor)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        classify_preprocess(np.zeros((0, 10, 3), np.uint8), tensor)


def test_concurrent_preprocess_from_threads(
    photo: npt.NDArray[np.uint8], image_tensor: MakeTensor
) -> None:
    """The kernel runs without the GIL and keeps no shared state: threads do not interfere."""
    expected, want = image_tensor("rgbx")
    classify_preprocess(photo, expected)
    tensors = [image_tensor("rgbx") for _ in range(4)]

    def work(index: int) -> None:
        for _ in range(10):
            classify_preprocess(photo, tensors[index][0])

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(work, range(4)))
    for _, array in tensors:
        np.testing.assert_array_equal(array, want)


#: Every pixel format the compiler writes (copyless-compile --input-format), as a HW view.
COMPILED_FORMATS = [
    (ColourFormat.RGBX, cl.DataType.UINT8, cl.MemoryLayout.NHWC4),
    (ColourFormat.RGBX_FP16, cl.DataType.FP16, cl.MemoryLayout.NHWC4),
    (ColourFormat.RGBX_BF16, cl.DataType.BF16, cl.MemoryLayout.NHWC4),
    (ColourFormat.RGBP, cl.DataType.UINT8, cl.MemoryLayout.NCHW),
    (ColourFormat.RGBP_FP16, cl.DataType.FP16, cl.MemoryLayout.NCHW),
    (ColourFormat.RGBP_FLOAT, cl.DataType.FLOAT32, cl.MemoryLayout.NCHW),
]


@pytest.mark.parametrize(("fmt", "data_type", "layout"), COMPILED_FORMATS,
                         ids=[f[0].name for f in COMPILED_FORMATS])  # fmt: skip
@pytest.mark.parametrize("operation", ["classify", "letterbox", "stretch"])
def test_every_compiled_format_is_written_straight_in_its_dtype(
    photo: npt.NDArray[np.uint8], fmt, data_type, layout, operation
) -> None:
    """Each format holds exactly the float planes' values converted once to its dtype
    (round to nearest even for FP16/BF16, to nearest for UINT8): no float intermediate."""
    planar = fmt.planar
    shape = (1, 3, 160, 160) if planar else (1, 160, 160, 4)
    info = cl.NpuTensorInfo("x", data_type, cl.TensorDirection.INPUT, cl.TensorType.HW,
                            layout, shape)  # fmt: skip
    assert colour_format_for(info) is fmt
    array = np.full(shape, 7, data_type.to_numpy())
    tensor = cl.NpuTensor(info, array, cl.MemoryType.USER_POINTER_CMA)
    floats = np.full((1, 3, 160, 160), -1.0, np.float32)
    float_info = cl.NpuTensorInfo("x", cl.DataType.FLOAT32, cl.TensorDirection.INPUT,
                                  cl.TensorType.HW, cl.MemoryLayout.NCHW, floats.shape)  # fmt: skip
    for dst in (tensor, (floats, float_info)):
        if operation == "classify":
            classify_preprocess(photo, dst, resize_short=182, crop=160)
        elif operation == "letterbox":
            letterbox(photo, dst, size=160)
        else:
            stretch(photo, dst)
    expected = floats if planar else np.concatenate(
        [floats, np.zeros((1, 1, 160, 160), np.float32)], axis=1).transpose(0, 2, 3, 1)  # fmt: skip
    if data_type is cl.DataType.UINT8:
        np.testing.assert_array_equal(array, np.floor(expected + 0.5).astype(np.uint8))
    else:
        np.testing.assert_array_equal(array, expected.astype(data_type.to_numpy()))
    assert fmt.image_bytes(160, 160) == array.nbytes


def test_colour_format_for_every_compiled_format(make_info) -> None:
    for fmt, data_type, layout in COMPILED_FORMATS:
        shape = (2, 3, 32, 32) if fmt.planar else (2, 32, 32, 4)
        assert colour_format_for(make_info(shape, data_type, memory_layout=layout)) is fmt
        assert (fmt.data_type, fmt.memory_layout) == (data_type, layout)
    with pytest.raises(cl.LayoutError, match="no image input"):  # BF16 planar: not compiled
        colour_format_for(make_info((1, 3, 8, 8), cl.DataType.BF16))
