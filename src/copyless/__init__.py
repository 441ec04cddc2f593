"""copyless: zero-copy, asynchronous ML inference for Python vision pipelines.

``import copyless as cl`` gives the whole public API (see API.md): the enums, the metadata,
:class:`NpuTensor`, the runner, the compiler, and the ``layout`` and ``ipc`` modules.
"""

from . import layout
from .memory import HostMemory, NpuTensor
from .types import (
    CopylessError,
    DataType,
    JobHandle,
    LayoutError,
    MemoryLayout,
    MemoryType,
    MemoryTypeError,
    ModelLoadError,
    NpuTensorInfo,
    OptionError,
    OutOfMemoryError,
    QuantParameters,
    RoundingMode,
    RunnerClosedError,
    RunnerType,
    StatusCode,
    TensorDirection,
    TensorError,
    TensorType,
    UnknownTensorError,
    UnsupportedError,
)

__version__ = "0.1.0"

__all__ = [
    "CopylessError",
    "DataType",
    "HostMemory",
    "JobHandle",
    "LayoutError",
    "MemoryLayout",
    "MemoryType",
    "MemoryTypeError",
    "ModelLoadError",
    "NpuTensor",
    "NpuTensorInfo",
    "OptionError",
    "OutOfMemoryError",
    "QuantParameters",
    "RoundingMode",
    "RunnerClosedError",
    "RunnerType",
    "StatusCode",
    "TensorDirection",
    "TensorError",
    "TensorType",
    "UnknownTensorError",
    "UnsupportedError",
    "__version__",
    "layout",
]
