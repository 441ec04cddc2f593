"""The enums of the public API, member for member as in AMD's VART-ML.

Only :class:`DataType` carries behaviour: its numpy dtype and item size, so every
layer can go from metadata to memory without a table of its own.
"""

from __future__ import annotations

import enum
from typing import Any

import ml_dtypes
import numpy as np


class DataType(enum.Enum):
    """Element type of a tensor view. BF16 is ``ml_dtypes.bfloat16`` in numpy."""

    UNKNOWN = 0
    BOOLEAN = 1
    INT8 = 2
    UINT8 = 3
    INT16 = 4
    UINT16 = 5
    BF16 = 6
    FP16 = 7
    INT32 = 8
    UINT32 = 9
    FLOAT32 = 10
    INT64 = 11
    UINT64 = 12

    def to_numpy(self) -> np.dtype[Any]:
        """The numpy dtype of this type; raises ``ValueError`` for UNKNOWN."""
        try:
            return _TO_NUMPY[self]
        except KeyError:
            raise ValueError(f"DataType.{self.name} has no numpy dtype") from None

    @classmethod
    def from_numpy(cls, dtype: Any) -> DataType:
        """The DataType of a numpy dtype (or anything ``np.dtype`` accepts)."""
        dt = np.dtype(dtype)
        for member, candidate in _TO_NUMPY.items():
            if candidate == dt:
                return member
        raise ValueError(f"numpy dtype {dt} has no copyless DataType")

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return int(self.to_numpy().itemsize)

    @property
    def is_integer(self) -> bool:
        """True for the integer types (BOOLEAN excluded): the quantizable ones."""
        return self in _INTEGER

    @property
    def is_float(self) -> bool:
        """True for FLOAT32, FP16 and BF16."""
        return self in (DataType.FLOAT32, DataType.FP16, DataType.BF16)


_TO_NUMPY: dict[DataType, np.dtype[Any]] = {
    DataType.BOOLEAN: np.dtype(np.bool_),
    DataType.INT8: np.dtype(np.int8),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.INT16: np.dtype(np.int16),
    DataType.UINT16: np.dtype(np.uint16),
    DataType.BF16: np.dtype(ml_dtypes.bfloat16),
    DataType.FP16: np.dtype(np.float16),
    DataType.INT32: np.dtype(np.int32),
    DataType.UINT32: np.dtype(np.uint32),
    DataType.FLOAT32: np.dtype(np.float32),
    DataType.INT64: np.dtype(np.int64),
    DataType.UINT64: np.dtype(np.uint64),
}

_INTEGER = frozenset(
    {
        DataType.INT8,
        DataType.UINT8,
        DataType.INT16,
        DataType.UINT16,
        DataType.INT32,
        DataType.UINT32,
        DataType.INT64,
        DataType.UINT64,
    }
)


class MemoryLayout(enum.Enum):
    """Physical order of a tensor's elements.

    Blocked layouts (``NHWC4``, ``NC4HW4``, ``HCWNC4`` ...) pad the channel dimension to a
    multiple of the group size; ``GENERIC`` is a permutation of the CPU dims given by
    ``NpuTensorInfo.memory_layout_order``.
    """

    UNKNOWN = 0
    NC = 1
    NCH = 2
    NHC = 3
    NHW = 4
    NWC = 5
    NHWC = 6
    NCHW = 7
    NHWC4 = 8
    NHWC8 = 9
    NC4HW4 = 10
    NC8HW8 = 11
    HCWNC4 = 12
    HCWNC8 = 13
    HCWNC16 = 14
    GENERIC = 15


class MemoryType(enum.Enum):
    """Where a tensor's bytes live; see the README's memory-type table.

    XRT_BO: allocated by the runner (fd-backed here, so always exportable).
    DMA_FD: a file descriptor of a shareable buffer (memfd, /dev/shm, dma-buf), mapped by copyless.
    USER_POINTER_CMA: user memory the device reads directly (locked host memory, device memory).
    USER_POINTER_NON_CMA: ordinary pageable memory; never valid for a HW-view tensor.
    """

    UNKNOWN = 0
    XRT_BO = 1
    DMA_FD = 2
    USER_POINTER_CMA = 3
    USER_POINTER_NON_CMA = 4


class TensorDirection(enum.Enum):
    INPUT = 0
    OUTPUT = 1


class TensorType(enum.Enum):
    """CPU: the ONNX model's view. HW: the view the compiled graph consumes natively."""

    CPU = 0
    HW = 1


class StatusCode(enum.Enum):
    """Result of execution calls, which never raise."""

    SUCCESS = 0
    FAILURE = 1
    INVALID_INPUT = 2
    INVALID_OUTPUT = 3
    OUT_OF_MEMORY = 4
    RUNTIME_ERROR = 5
    JOB_PENDING = 6
    INVALID_JOB_ID = 7
    RESOURCE_UNAVAILABLE = 8
    UNSUPPORTED = 9


class RoundingMode(enum.Enum):
    UNKNOWN = 0
    ROUND_TO_NEAREST_EVEN = 1
    ROUND_TOWARD_ZERO = 2


class RunnerType(enum.Enum):
    """Which engine runs the compiled model. ``VAIML`` (the default, the seeds' name): the
    engine measured fastest for this model on this machine at its compiled precision (see
    ``Runner.engine`` / ``Runner.engine_reason``). ``ONNXRUNTIME`` / ``OPENVINO`` force one."""

    VAIML = 2
    ONNXRUNTIME = 0
    OPENVINO = 1
