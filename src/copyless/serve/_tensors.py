"""A served model's tensors as the Open Inference Protocol sees them: the model's HW view
(what the engine binds: a model compiled with ``--input-format rgbx`` takes uint8 pixels),
with KServe's datatype names and a batch dimension of ``-1`` where rows can be batched.

A tensor whose HW view has the batch first (``batch_axis == 0``) is *batched*: a request
sends ``k`` rows, ``1 <= k <= max_batch_size`` (the compiled batch size), shape
``[k, *rest]``, and each row is one item of the model's :class:`~copyless.Pipeline`. A view
with the batch elsewhere (HCWNC4...) is served only on a model compiled for batch 1, whole:
the request's shape is the view's shape (Triton's ``max_batch_size: 0``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..model import TensorSpec
from ..runner import batch_axis
from ..types import DataType, NpuTensorInfo, UnsupportedError

__all__ = ["DATATYPES", "ServedTensor", "datatype_of", "numpy_dtype", "served_tensors"]

#: copyless DataType -> the protocol's datatype name.
DATATYPES: dict[DataType, str] = {
    DataType.BOOLEAN: "BOOL",
    DataType.INT8: "INT8",
    DataType.UINT8: "UINT8",
    DataType.INT16: "INT16",
    DataType.UINT16: "UINT16",
    DataType.BF16: "BF16",
    DataType.FP16: "FP16",
    DataType.INT32: "INT32",
    DataType.UINT32: "UINT32",
    DataType.FLOAT32: "FP32",
    DataType.INT64: "INT64",
    DataType.UINT64: "UINT64",
}


def datatype_of(data_type: DataType) -> str:
    try:
        return DATATYPES[data_type]
    except KeyError:
        raise UnsupportedError(f"{data_type.name} has no Open Inference Protocol "
                               "datatype") from None


_NUMPY = {name: np.dtype(data_type.to_numpy()) for data_type, name in DATATYPES.items()}


def numpy_dtype(datatype: str) -> np.dtype[np.generic] | None:
    """The numpy dtype of a protocol datatype name, None for one copyless has no tensor of
    (BYTES, FP64)."""
    return _NUMPY.get(datatype)


@dataclass(frozen=True, slots=True)
class ServedTensor:
    """One input or output. ``shape``: what metadata reports (``-1`` for the batch of a
    batched tensor, and for each data-dependent dim of an output); ``rest``: a row's shape
    without
    the batch (batched), or the whole shape; ``row_bytes``: one row's bytes (the whole
    tensor's when not batched); ``dynamic``: an output whose shape the data decides."""

    name: str
    datatype: str
    dtype: np.dtype[np.generic]
    shape: tuple[int, ...]
    rest: tuple[int, ...]
    batched: bool
    dynamic: bool = False

    @property
    def row_bytes(self) -> int:
        return math.prod(self.rest) * self.dtype.itemsize

    def request_shape(self, rows: int) -> tuple[int, ...]:
        """The shape of ``rows`` rows as a request (or a response) carries them."""
        return (rows, *self.rest) if self.batched else self.rest


def _served(info: NpuTensorInfo, batch: int, dynamic: tuple[int, ...] | None) -> ServedTensor:
    """``dynamic``: the data-dependent dims of an output (None: a fixed shape); metadata and
    config report them as -1 and the others as they are (boxes ``[-1, 4]``)."""
    dtype = np.dtype(info.data_type.to_numpy())
    datatype = datatype_of(info.data_type)
    if dynamic is not None:
        if batch != 1:
            raise UnsupportedError(
                f"output {info.name!r}: its shape depends on the data, which the server "
                "serves only on a model compiled for batch 1"
            )
        shape = tuple(-1 if i in dynamic else d for i, d in enumerate(info.shape))
        return ServedTensor(info.name, datatype, dtype, shape, tuple(info.shape), False, True)
    if info.shape and batch_axis(info) == 0 and info.shape[0] != batch:
        raise UnsupportedError(
            f"tensor {info.describe()} has no batch dimension (its first dim is "
            f"{info.shape[0]}, the model's batch {batch}): the server batches rows along it; "
            "recompile the model with copyless-compile, which adds one to a [3, H, W] input"
        )
    if info.shape and batch_axis(info) == 0 and info.strides is None:
        rest = tuple(info.shape[1:])
        return ServedTensor(info.name, datatype, dtype, (-1, *rest), rest, True)
    if batch != 1:
        raise UnsupportedError(
            f"tensor {info.describe()}: its batch is not the first dim of the HW view, so "
            "rows cannot be batched; compile the model for batch 1 to serve it"
        )
    shape = tuple(info.shape)
    return ServedTensor(info.name, datatype, dtype, shape, shape, False)


def served_tensors(
    inputs: list[NpuTensorInfo], outputs: list[NpuTensorInfo], specs: list[TensorSpec],
    batch: int,
) -> tuple[list[ServedTensor], list[ServedTensor], int]:  # fmt: skip
    """``(inputs, outputs, max_batch_size)`` of a model: its HW infos as served; raises
    :class:`UnsupportedError` for a model the server cannot serve (say which and why)."""
    ins = [_served(info, batch, None) for info in inputs]
    outs = [_served(info, batch, (spec.dynamic_dims or (0,)) if spec.dynamic else None)
            for info, spec in zip(outputs, specs, strict=True)]  # fmt: skip
    batched = {t.batched for t in ins + outs if not t.dynamic}
    if len(batched) > 1:  # only at batch 1 (else _served raised): serve every tensor whole
        ins, outs = [_whole(t) for t in ins], [_whole(t) for t in outs]
        batched = {False}
    return ins, outs, batch if batched == {True} else 0


def _whole(tensor: ServedTensor) -> ServedTensor:
    if not tensor.batched:
        return tensor
    shape = (1, *tensor.rest)
    return ServedTensor(tensor.name, tensor.datatype, tensor.dtype, shape, shape, False)
