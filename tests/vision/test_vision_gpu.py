"""GPU preprocessing (``copyless.vision._gpu``): the matrix formulation the GPU runs, checked
against the C kernel with numpy as the array module (everywhere), then on CuPy (``cuda``)."""

from __future__ import annotations

import numpy as np
import pytest

import copyless as cl
from copyless.vision import ColourFormat, classify_preprocess, letterbox
from copyless.vision._gpu import DeviceImage, download, resample
from copyless.vision._preprocess import classify_geometry, letterbox_geometry
from cuda_helpers import optional, requires_cuda


def _numpy_resample(photo, canvas, fmt, box, rect, fill) -> None:
    pixels = photo.astype(np.float32).reshape(photo.shape[0], -1)
    resample(np, pixels, canvas, fmt, box, rect, fill)


@pytest.mark.parametrize("kind", ["rgbx", "float"])
def test_the_gpu_formulation_matches_the_c_kernel_classify(photo, image_tensor, kind) -> None:
    tensor, expected = image_tensor(kind)
    classify_preprocess(photo, tensor)
    fmt = ColourFormat.RGBX if kind == "rgbx" else ColourFormat.RGBP_FLOAT
    actual = np.zeros_like(expected)
    box, rect = classify_geometry(photo.shape[1], photo.shape[0], 256, 224)
    _numpy_resample(photo, actual[0], fmt, box, rect, 0.0)
    difference = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    assert difference.max() <= (1.0 if kind == "rgbx" else 1e-2)


@pytest.mark.parametrize("shape", [(480, 640), (640, 480), (100, 1500)])
def test_the_gpu_formulation_matches_the_c_kernel_letterbox(image_tensor, shape) -> None:
    photo = np.random.default_rng(1).integers(0, 256, (*shape, 3), dtype=np.uint8)
    tensor, expected = image_tensor("rgbx", size=320)
    placement = letterbox(photo, tensor, size=320)
    actual = np.zeros_like(expected)
    again, rect = letterbox_geometry(shape[1], shape[0], 320)
    assert again == placement
    box = (0.0, 0.0, float(shape[1]), float(shape[0]))
    _numpy_resample(photo, actual[0], ColourFormat.RGBX, box, rect, 114.0)
    assert np.abs(actual.astype(int) - expected.astype(int)).max() <= 1


def test_download_of_a_host_tensor_is_a_view(image_tensor) -> None:
    tensor, array = image_tensor("rgbx")
    assert np.shares_memory(download(tensor), array)


@pytest.mark.cuda
@requires_cuda
def test_device_image_writes_device_tensors_like_the_cpu(photo, image_tensor) -> None:
    cupy = optional("cupy")
    expected_tensor, expected = image_tensor("rgbx")
    classify_preprocess(photo, expected_tensor)
    device = cupy.zeros(expected.shape, cupy.uint8)
    tensor = cl.NpuTensor(expected_tensor.info, device, cl.MemoryType.USER_POINTER_CMA)
    image = DeviceImage(photo)
    image.classify(tensor)
    assert np.abs(download(tensor).astype(int) - expected.astype(int)).max() <= 1
    with pytest.raises(cl.TensorError, match="host memory"):
        image.classify(expected_tensor)
