"""Colour formats of image input tensors, and the per-image view preprocessing writes into.

Two families of image inputs reach a model:

* ``RGBX`` / ``BGRX``: the HW view of a model compiled with the ``rgbx`` option, UINT8
  NHWC4 ``[N, H, W, 4]``, packed pixels with the 4th byte 0 (normalisation is in the graph).
* ``RGBP_FLOAT``: the CPU view, FLOAT32 NCHW ``[N, 3, H, W]`` planar RGB in pixel units
  0..255 (not normalised; the runner converts it).

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
    RGBP_FLOAT = "RGBP_FLOAT"  #: FLOAT32 NCHW [N, 3, H, W], pixel units 0..255

    @property
    def data_type(self) -> DataType:
        return DataType.FLOAT32 if self is ColourFormat.RGBP_FLOAT else DataType.UINT8

    @property
    def memory_layout(self) -> MemoryLayout:
        return MemoryLayout.NCHW if self is ColourFormat.RGBP_FLOAT else MemoryLayout.NHWC4

    @property
    def bgr(self) -> bool:
        return self is ColourFormat.BGRX

    def image_bytes(self, height: int, width: int) -> int:
        """Bytes one ``height`` x ``width`` image takes in this format."""
        return height * width * (12 if self is ColourFormat.RGBP_FLOAT else 4)

    def image_shape(self, batch: int, height: int, width: int) -> tuple[int, ...]:
        """The tensor shape holding ``batch`` such images."""
        if self is ColourFormat.RGBP_FLOAT:
            return (batch, 3, height, width)
        return (batch, height, width, 4)


def colour_format_for(info: NpuTensorInfo) -> ColourFormat:
    """The colour format an image input of this view takes (RGBX for NHWC4 uint8).

    Raises :class:`~copyless.LayoutError` (a ``ValueError``) for a view that is no image input
    preprocessing can write: other dtypes, layouts, or channel counts.
    """
    shape = info.shape
    if (
        info.data_type is DataType.UINT8
        and info.memory_layout is MemoryLayout.NHWC4
        and len(shape) == 4
        and shape[3] == 4
    ):
        return ColourFormat.RGBX
    if (
        info.data_type is DataType.FLOAT32
        and info.memory_layout is MemoryLayout.NCHW
        and len(shape) == 4
        and shape[1] == 3
    ):
        return ColourFormat.RGBP_FLOAT
    raise LayoutError(
        f"tensor {info.describe()} is no image input: preprocessing writes UINT8 NHWC4 "
        "[N,H,W,4] (RGBX/BGRX) or FLOAT32 NCHW [N,3,H,W] (RGBP_FLOAT)"
    )


def image_view(
    dst: Destination,
    colour_format: ColourFormat,
    height: int,
    width: int,
    batch_index: int = 0,
) -> npt.NDArray[Any]:
    """A writable ``(height, width, C)`` view of image ``batch_index`` of ``dst`` (no copy).

    C is 4 for RGBX/BGRX and 3 for RGBP_FLOAT (a transposed, strided view of the planes).
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
    if colour_format is ColourFormat.RGBP_FLOAT:
        image = image.transpose(1, 2, 0)
    return image


_COMPATIBLE = {
    ColourFormat.RGBX: (ColourFormat.RGBX,),
    ColourFormat.BGRX: (ColourFormat.RGBX,),  # same bytes; the info cannot tell them apart
    ColourFormat.RGBP_FLOAT: (ColourFormat.RGBP_FLOAT,),
}


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
