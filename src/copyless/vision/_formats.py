"""Colour formats of image input tensors, and the per-image view preprocessing writes into.

Every pixel format ``copyless-compile --input-format`` writes (and the CPU view) is an image
input preprocessing writes straight into, in pixel units 0..255 (normalisation is in the
graph, or applied by the host where the model records it):

* packed ``[N, H, W, 4]`` (NHWC4, the 4th channel 0): ``RGBX``/``BGRX`` (UINT8),
  ``RGBX_FP16`` (FP16), ``RGBX_BF16`` (BF16);
* planar ``[N, 3, H, W]`` (NCHW): ``RGBP`` (UINT8), ``RGBP_FP16`` (FP16), ``RGBP_FLOAT``
  (FLOAT32, also the CPU view of every image model; the runner converts it).

The fused kernel converts each pixel once, as it is written (FP16 and BF16 rounded to
nearest even): no float intermediate image.

:func:`image_view` resolves a destination (an :class:`~copyless.NpuTensor`, or an
``(array, info)`` pair) to a strided ``(H, W, C)`` numpy view of one image of the batch, over
the destination's own memory: no copy, ever.
"""

from __future__ import annotations

import enum
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..types import DataType, LayoutError, MemoryLayout, NpuTensorInfo, TensorError

#: What preprocessing writes into: a tensor, or a buffer with the info that describes it.
Destination: TypeAlias = "NpuTensor | tuple[Any, NpuTensorInfo]"


class ColourFormat(enum.Enum):
    """Pixel format of an image input tensor."""

    RGBX = "RGBX"  #: UINT8 NHWC4 [N, H, W, 4], R G B 0
    BGRX = "BGRX"  #: UINT8 NHWC4 [N, H, W, 4], B G R 0
    RGBX_FP16 = "RGBX_FP16"  #: FP16 NHWC4 [N, H, W, 4], R G B 0
    RGBX_BF16 = "RGBX_BF16"  #: BF16 NHWC4 [N, H, W, 4], R G B 0
    RGBP = "RGBP"  #: UINT8 NCHW [N, 3, H, W]
    RGBP_FP16 = "RGBP_FP16"  #: FP16 NCHW [N, 3, H, W]
    RGBP_FLOAT = "RGBP_FLOAT"  #: FLOAT32 NCHW [N, 3, H, W], pixel units 0..255

    @property
    def data_type(self) -> DataType:
        return _DATA_TYPES[self]

    @property
    def memory_layout(self) -> MemoryLayout:
        return MemoryLayout.NCHW if self.planar else MemoryLayout.NHWC4

    @property
    def planar(self) -> bool:
        """Planes ``[N, 3, H, W]`` (else packed pixels ``[N, H, W, 4]``)."""
        return self.name.startswith("RGBP")

    @property
    def bgr(self) -> bool:
        return self is ColourFormat.BGRX

    def image_bytes(self, height: int, width: int) -> int:
        """Bytes one ``height`` x ``width`` image takes in this format."""
        channels = 3 if self.planar else 4
        return height * width * channels * self.data_type.to_numpy().itemsize

    def image_shape(self, batch: int, height: int, width: int) -> tuple[int, ...]:
        """The tensor shape holding ``batch`` such images."""
        if self.planar:
            return (batch, 3, height, width)
        return (batch, height, width, 4)


_DATA_TYPES = {
    ColourFormat.RGBX: DataType.UINT8,
    ColourFormat.BGRX: DataType.UINT8,
    ColourFormat.RGBX_FP16: DataType.FP16,
    ColourFormat.RGBX_BF16: DataType.BF16,
    ColourFormat.RGBP: DataType.UINT8,
    ColourFormat.RGBP_FP16: DataType.FP16,
    ColourFormat.RGBP_FLOAT: DataType.FLOAT32,
}
#: (layout, dtype) -> the format of that view (BGRX shares RGBX's bytes: RGBX is named).
_BY_VIEW = {(f.memory_layout, f.data_type): f for f in ColourFormat if f is not ColourFormat.BGRX}


def colour_format_for(info: NpuTensorInfo) -> ColourFormat:
    """The colour format an image input of this view takes (RGBX for NHWC4 uint8,
    RGBX_FP16/RGBX_BF16, RGBP/RGBP_FP16/RGBP_FLOAT for NCHW with 3 channels).

    Raises :class:`~copyless.LayoutError` (a ``ValueError``) for a view that is no image input
    preprocessing can write: other dtypes, layouts, or channel counts.
    """
    shape = info.shape
    found = _BY_VIEW.get((info.memory_layout, info.data_type))
    if (
        found is not None
        and len(shape) == 4
        and shape[1 if found.planar else 3] == (3 if found.planar else 4)
    ):
        return found
    raise LayoutError(
        f"tensor {info.describe()} is no image input: preprocessing writes NHWC4 "
        "[N,H,W,4] in UINT8/FP16/BF16 (RGBX, BGRX, RGBX_FP16, RGBX_BF16) or NCHW [N,3,H,W] in "
        "UINT8/FP16/FLOAT32 (RGBP, RGBP_FP16, RGBP_FLOAT)"
    )


def image_view(
    dst: Destination,
    colour_format: ColourFormat,
    height: int,
    width: int,
    batch_index: int = 0,
) -> npt.NDArray[Any]:
    """A writable ``(height, width, C)`` view of image ``batch_index`` of ``dst`` (no copy).

    C is 4 for the packed formats and 3 for the planar ones (a transposed, strided view of
    the planes).
    Raises :class:`~copyless.LayoutError` naming both byte sizes when ``dst`` does not hold
    ``colour_format`` images of that size, :class:`~copyless.TensorError` when it is
    read-only or ``batch_index`` is out of range.
    """
    array, info = _tensor_array(dst)
    try:
        matches = colour_format_for(info) in _COMPATIBLE[colour_format]
    except LayoutError:
        matches = False
    batch = info.shape[0] if info.shape else 1
    if not matches or info.shape != colour_format.image_shape(batch, height, width):
        per_image = info.size_in_bytes // max(batch, 1)
        raise LayoutError(
            f"preprocess writes {colour_format.image_bytes(height, width)} bytes per image "
            f"({colour_format.name} {width}x{height}), tensor holds {per_image} "
            f"({info.describe()})"
        )
    if isinstance(batch_index, bool) or not 0 <= batch_index < batch:
        raise TensorError(
            f"batch_index {batch_index!r} out of range for tensor {info.name!r} of batch {batch}"
        )
    if not array.flags.writeable:
        raise TensorError(f"tensor {info.name!r}: destination is read-only")
    image: npt.NDArray[Any] = array[batch_index]
    if colour_format.planar:
        image = image.transpose(1, 2, 0)
    return image


_COMPATIBLE = {f: (f,) for f in ColourFormat}
_COMPATIBLE[ColourFormat.BGRX] = (ColourFormat.RGBX,)  # same bytes; the info cannot tell


def _tensor_array(dst: Destination) -> tuple[npt.NDArray[Any], NpuTensorInfo]:
    """The numpy view of ``dst`` in its info's shape and dtype, over its memory."""
    if isinstance(dst, NpuTensor):
        return dst.numpy(), dst.info
    if not (isinstance(dst, tuple) and len(dst) == 2 and isinstance(dst[1], NpuTensorInfo)):
        raise TypeError(
            f"destination must be an NpuTensor or an (array, NpuTensorInfo) pair, "
            f"got {type(dst).__name__}"
        )
    buffer, info = dst
    array = buffer if isinstance(buffer, np.ndarray) else np.frombuffer(buffer, np.uint8)
    if array.shape == info.shape and array.dtype == info.numpy_dtype:
        return array, info
    if not array.flags.c_contiguous or info.strides is not None:
        raise TensorError(
            f"tensor {info.name!r}: a buffer of shape {array.shape} {array.dtype} must be "
            f"C-contiguous to be viewed as {info.describe()}"
        )
    flat = array.reshape(-1).view(np.uint8)
    if flat.nbytes < info.size_in_bytes:
        raise TensorError(
            f"tensor {info.name!r}: buffer of {flat.nbytes} bytes is smaller than the "
            f"{info.size_in_bytes} bytes of {info.describe()}"
        )
    view = flat[: info.size_in_bytes].view(info.numpy_dtype).reshape(info.shape)
    return view, info
