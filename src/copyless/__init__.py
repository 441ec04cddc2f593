"""copyless: zero-copy, asynchronous ML inference for Python vision pipelines.

``import copyless as cl`` gives the whole public API, documented in the repository's
``docs/api.md``: the enums, the metadata, :class:`NpuTensor`, the runner, the pipeline, the
compiler, and the ``layout`` and ``ipc`` modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import ipc, layout
from .memory import HostMemory, NpuTensor
from .model import CompiledModel, load_model
from .pipeline import Pipeline, PipelineStats, Result
from .runner import DeviceSession, Runner, RunnerFactory, RunnerOptions
from .types import (
    CopylessError,
    DataType,
    ExecuteAsyncCallback,
    JobError,
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

if TYPE_CHECKING:
    from .model import compile_model, compile_to_memory

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``compile_model`` / ``compile_to_memory``: the compiler loads on first use."""
    if name in ("compile_model", "compile_to_memory"):
        from . import model

        value = getattr(model, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CompiledModel",
    "CopylessError",
    "DataType",
    "DeviceSession",
    "ExecuteAsyncCallback",
    "HostMemory",
    "JobError",
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
    "Pipeline",
    "PipelineStats",
    "QuantParameters",
    "Result",
    "RoundingMode",
    "Runner",
    "RunnerClosedError",
    "RunnerFactory",
    "RunnerOptions",
    "RunnerType",
    "StatusCode",
    "TensorDirection",
    "TensorError",
    "TensorType",
    "UnknownTensorError",
    "UnsupportedError",
    "__version__",
    "compile_model",
    "compile_to_memory",
    "ipc",
    "layout",
    "load_model",
]
