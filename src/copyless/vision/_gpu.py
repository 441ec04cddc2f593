"""Preprocessing on the GPU, into device-memory input tensors (the apps' ``--device cuda``).

:class:`DeviceImage` uploads a decoded uint8 image once (the one host-to-device copy) and
writes the same geometry as :func:`~copyless.vision.classify_preprocess` and
:func:`~copyless.vision.letterbox` (PIL's antialiased triangle filter, as the C kernel)
straight into a device tensor of a CUDA runner: two matrix products with the filter weights
(rows, then columns), rounding, channel order and padding, all on CuPy's current stream (a
CUDA runner's engines are ordered after it when it is the legacy default stream; otherwise
pass the stream to the runner). Results match the CPU kernel to within one grey level.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..memory import cuda as cuda_memory
from ..types import DataType, TensorError
from ._formats import ColourFormat, colour_format_for
from ._preprocess import Letterbox, _source, classify_geometry, letterbox_geometry

__all__ = ["DeviceImage", "download", "resample", "upload"]


@functools.lru_cache(maxsize=32)
def _weights(in_size: int, in0: float, in1: float, out_size: int) -> npt.NDArray[np.float32]:
    """The (out_size, in_size) resampling matrix of the C kernel's ``coeffs_init``."""
    scale = (in1 - in0) / out_size
    filterscale = max(scale, 1.0)
    matrix = np.zeros((out_size, in_size), np.float32)
    for o in range(out_size):
        center = in0 + (o + 0.5) * scale
        lo = max(0, math.floor(center - filterscale + 0.5))
        hi = min(in_size, math.floor(center + filterscale + 0.5))
        if hi <= lo:  # a degenerate box at an edge: the nearest sample
            lo = min(max(math.floor(center), 0), in_size - 1)
            hi = lo + 1
        taps = np.maximum(0.0, 1.0 - np.abs((np.arange(lo, hi) - center + 0.5) / filterscale))
        total = taps.sum()
        matrix[o, lo:hi] = taps / total if total > 0 else 1.0 / (hi - lo)
    return matrix


class DeviceImage:
    """A uint8 RGB(X) image in device memory (uploaded once: a copy), resampled into device
    tensors of the RGBX (uint8 NHWC4) or RGBP_FLOAT (float32 NCHW) formats."""

    def __init__(self, image: npt.NDArray[np.uint8], device_id: int = 0) -> None:
        self._cupy = cuda_memory.cupy_module()
        host = _source(image)[..., :3]
        self._height, self._width = host.shape[:2]
        with self._cupy.cuda.Device(device_id):
            pixels = self._cupy.asarray(np.ascontiguousarray(host))
            self._pixels = pixels.astype(self._cupy.float32).reshape(self._height, -1)

    def synchronize(self) -> None:
        """Wait for the work queued so far (for timing; ordering needs no host wait)."""
        self._cupy.cuda.get_current_stream().synchronize()

    def classify(self, dst: NpuTensor, *, resize_short: int = 256, crop: int = 224) -> None:
        """:func:`~copyless.vision.classify_preprocess` on the GPU (no host copy)."""
        box, rect = classify_geometry(self._width, self._height, resize_short, crop)
        self._resample(dst, box, rect, 0.0)

    def letterbox(self, dst: NpuTensor, *, size: int = 640, fill: int = 114) -> Letterbox:
        """:func:`~copyless.vision.letterbox` on the GPU; returns the placement."""
        placement, rect = letterbox_geometry(self._width, self._height, size)
        box = (0.0, 0.0, float(self._width), float(self._height))
        self._resample(dst, box, rect, float(fill))
        return placement

    def _resample(
        self, dst: NpuTensor, box: tuple[float, ...], rect: tuple[int, ...], fill: float
    ) -> None:
        memory = dst.device_memory
        if memory is None:
            raise TensorError(f"tensor {dst.info.name!r} is host memory: use vision.letterbox")
        canvas = cuda_memory.as_cupy(memory, dst.info.shape, dst.info.data_type)[0]
        fmt = colour_format_for(dst.info)
        resample(self._cupy, self._pixels, canvas, fmt, box, rect, fill)


def resample(
    xp: Any,
    pixels: Any,
    canvas: Any,
    fmt: ColourFormat,
    box: tuple[float, ...],
    rect: tuple[int, ...],
    fill: float,
) -> None:
    """Resample ``pixels`` (float32, ``(H, W*3)``) into ``canvas`` (one image of ``fmt``,
    ``(H, W, 4)`` uint8 or ``(3, H, W)`` float32), with ``xp`` the array module: CuPy on
    the GPU, numpy in the tests that check it against the C kernel."""
    height, width = pixels.shape[0], pixels.shape[1] // 3
    x0, y0, x1, y1 = box
    ox, oy, ow, oh = rect
    rows = xp.asarray(_weights(height, y0, y1, oh)) @ pixels
    cols = xp.asarray(_weights(width, x0, x1, ow))
    image = xp.matmul(cols, rows.reshape(oh, width, 3))  # (oh, ow, 3)
    if fmt is ColourFormat.BGRX:
        image = image[..., ::-1]
    if fmt.planar:
        canvas = canvas.transpose(1, 2, 0)
    if fmt.data_type is DataType.UINT8:
        image = xp.floor(image + 0.5)
    canvas[..., :3] = fill
    if canvas.shape[-1] == 4:
        canvas[..., 3] = 0
    canvas[oy : oy + oh, ox : ox + ow, :3] = image


def download(tensor: NpuTensor, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
    """A host copy of ``tensor`` (D2H for device memory, a view for host memory)."""
    memory = tensor.device_memory
    if memory is None:
        return tensor.numpy()
    if out is None:
        out = np.empty(tensor.info.shape, tensor.info.numpy_dtype)
    cuda_memory.copy_to_host(out, memory)
    return out


def upload(tensor: NpuTensor, data: npt.NDArray[np.uint8]) -> None:
    """Copy the bytes ``data`` into the start of ``tensor`` (H2D for device memory)."""
    memory = tensor.device_memory
    if memory is None:
        tensor.bytes_view()[: data.nbytes] = data
    else:
        cuda_memory.copy_to_device(memory, np.ascontiguousarray(data))
