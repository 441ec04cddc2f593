"""The in-memory form of a compiled model: what the loader returns and the runner executes.

A compiled model is a chain of partitions (``par_0``, ``par_1``, ...). Each partition is an
ONNX graph run by one engine. ``par_0``'s graph consumes the model inputs in their *HW view*
(the preprocessing and quantization the compiler folded in are its first nodes), so a HW
tensor is bound to the engine in place. Boundary tensors (model inputs and outputs) are
bound by the user; tensors that flow between partitions are intermediates the runner owns
(the split I/O memory model).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..types import NpuTensorInfo, QuantParameters


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A boundary tensor of the model in both views.

    ``cpu`` is the ONNX model's view, ``hw`` the view the compiled graph consumes/produces.
    Shapes carry the compiled batch size. ``quant`` is set for quantized integer HW views
    (``hw = quantize(cpu, quant)``). ``dynamic`` marks an output whose shape depends on the
    data; ``dynamic_dims`` lists those dims (indices into the shape, the same in both views).
    They hold a capacity in the infos: the bound the compiler derived or the caller set at
    compile time, or -1 where none is known (an unknown rank reads ``(-1,)``). The runner
    takes any capacity there and writes the result at the start of the caller's tensor.
    """

    name: str
    cpu: NpuTensorInfo
    hw: NpuTensorInfo
    quant: QuantParameters | None = None
    dynamic: bool = False
    dynamic_dims: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Intermediate:
    """A tensor between partitions, allocated once and owned by the runner."""

    name: str
    info: NpuTensorInfo  # HW-free: the engine's own view (dtype, shape)


@dataclass(frozen=True, slots=True)
class Partition:
    """One engine graph. ``inputs``/``outputs`` are graph tensor names, in graph order."""

    name: str  # "par_0", "par_1", ...
    target: str  # "npu": the accelerated engine; "cpu": the CPU partition
    onnx_bytes: bytes
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CompiledModel:
    """Everything the runner needs, validated by the loader.

    ``cache_path`` is where runners over this model keep their engine caches when their
    options name none (``load_model(path, cache_path=...)``); it is not part of the model's
    identity (equality ignores it).
    """

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    partitions: tuple[Partition, ...]
    intermediates: tuple[Intermediate, ...] = ()
    batch_size: int = 1
    format_version: int = 1
    metadata: dict[str, str] = field(default_factory=dict)
    cache_path: str | None = field(default=None, compare=False)
