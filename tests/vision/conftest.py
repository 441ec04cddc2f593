"""Fixtures for the vision tests: real photos encoded in tmp_path, image-input tensors."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import skimage.data
from PIL import Image

import copyless as cl


@pytest.fixture(scope="session")
def photo() -> npt.NDArray[np.uint8]:
    """skimage's chelsea (tabby cat) resized to 640x480 RGB: the reference-app photo size."""
    return np.asarray(Image.fromarray(skimage.data.chelsea()).resize((640, 480), Image.BILINEAR))


@pytest.fixture
def photo_jpeg(tmp_path: Path, photo: npt.NDArray[np.uint8]) -> Path:
    path = tmp_path / "chelsea.jpg"
    Image.fromarray(photo).save(path, format="JPEG", quality=95)
    return path


@pytest.fixture
def encode_jpeg() -> Callable[..., bytes]:
    """``encode_jpeg(image, quality=95)``: the image as JPEG bytes (Pillow's libjpeg)."""

    def encode(image: npt.NDArray[np.uint8], quality: int = 95) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, format="JPEG", quality=quality)
        return buf.getvalue()

    return encode


@pytest.fixture
def image_tensor() -> Callable[..., tuple[cl.NpuTensor, npt.NDArray[np.generic]]]:
    """``image_tensor(kind, size, batch=1)``: a HW RGBX or CPU planar-float input tensor over
    a numpy array prefilled with a sentinel, and that array."""

    def make(
        kind: str, size: int = 224, batch: int = 1
    ) -> tuple[cl.NpuTensor, npt.NDArray[np.generic]]:
        if kind == "rgbx":
            shape: tuple[int, ...] = (batch, size, size, 4)
            array: npt.NDArray[np.generic] = np.full(shape, 77, np.uint8)
            info = cl.NpuTensorInfo(
                "input", cl.DataType.UINT8, cl.TensorDirection.INPUT, cl.TensorType.HW,
                cl.MemoryLayout.NHWC4, shape,
            )
            return cl.NpuTensor(info, array, cl.MemoryType.USER_POINTER_CMA), array
        shape = (batch, 3, size, size)
        array = np.full(shape, -1.0, np.float32)
        info = cl.NpuTensorInfo(
            "input", cl.DataType.FLOAT32, cl.TensorDirection.INPUT, cl.TensorType.CPU,
            cl.MemoryLayout.NCHW, shape,
        )
        return cl.NpuTensor(info, array, cl.MemoryType.USER_POINTER_NON_CMA), array

    return make
