"""The base layer: enums, metadata, errors, the pixel rules of every image reader, the one
way to write a file atomically (:class:`AtomicFile`) and the one parser of a listening
address (:func:`parse_address`, for copyless-serve, copyless-video and the Ray layer).
Imports nothing else of copyless."""

from ._address import Address, parse_address
from ._cpu import CpuInfo, cpu_info
from ._engines import (
    BF16,
    bf16_available,
    bf16_refusal,
    cpu_capabilities,
    openvino_core,
    openvino_unloadable,
)
from ._enums import (
    DataType,
    MemoryLayout,
    MemoryType,
    RoundingMode,
    RunnerType,
    StatusCode,
    TensorDirection,
    TensorType,
)
from ._errors import (
    CopylessError,
    DeviceUnavailableError,
    JobError,
    LayoutError,
    MemoryTypeError,
    ModelLoadError,
    OptionError,
    OutOfMemoryError,
    RunnerClosedError,
    TensorError,
    UnknownTensorError,
    UnsupportedError,
)
from ._files import AtomicFile, apply_umask, atomic_path, umask, write_atomically
from ._info import ExecuteAsyncCallback, JobHandle, NpuTensorInfo, QuantParameters
from ._readonly import ReadOnly
from ._rounds import best_round_medians, round_medians
from ._samples import (
    as_rgb,
    jpeg_orientation,
    orient,
    pil_orientation,
    pil_rgb,
    upright_size,
)
from ._serialize import info_from_dict, info_to_dict, quant_from_dict, quant_to_dict

__all__ = [
    "BF16",
    "Address",
    "AtomicFile",
    "CopylessError",
    "CpuInfo",
    "DataType",
    "DeviceUnavailableError",
    "ExecuteAsyncCallback",
    "JobError",
    "JobHandle",
    "LayoutError",
    "MemoryLayout",
    "MemoryType",
    "MemoryTypeError",
    "ModelLoadError",
    "NpuTensorInfo",
    "OptionError",
    "OutOfMemoryError",
    "QuantParameters",
    "ReadOnly",
    "RoundingMode",
    "RunnerClosedError",
    "RunnerType",
    "StatusCode",
    "TensorDirection",
    "TensorError",
    "TensorType",
    "UnknownTensorError",
    "UnsupportedError",
    "apply_umask",
    "as_rgb",
    "atomic_path",
    "best_round_medians",
    "cpu_info",
    "info_from_dict",
    "info_to_dict",
    "jpeg_orientation",
    "bf16_available",
    "bf16_refusal",
    "cpu_capabilities",
    "openvino_core",
    "openvino_unloadable",
    "parse_address",
    "orient",
    "pil_orientation",
    "pil_rgb",
    "quant_from_dict",
    "quant_to_dict",
    "round_medians",
    "umask",
    "upright_size",
    "write_atomically",
]
