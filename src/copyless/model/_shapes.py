"""Reading a source model: loading, type checks, fixing input shapes, probing output shapes.

Shapes are probed with onnxruntime itself (its graph resolution runs shape inference,
contrib ops included), so whatever onnxruntime can tell statically the compiler records;
dims it cannot tell are data-dependent: :mod:`._capacity` bounds them (the capacity an info
reports), -1 where no bound is known.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import onnx
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from ..types import (
    DataType,
    ModelLoadError,
    NpuTensorInfo,
    OptionError,
    TensorDirection,
    TensorType,
    UnsupportedError,
)
from . import _capacity as capacity
from ._graph import IR_VERSION, PARSE_ERRORS, cpu_layout_for, dtype_of_elem, graph_inputs


class ShapeOptions(Protocol):
    """The compile options the shape work reads (``copyless.model._options.CompileOptions``
    has them; that module imports the postprocess package, which imports this one, so
    this one does not import it, even for types)."""

    @property
    def batch_size(self) -> int: ...

    @property
    def input_shapes(self) -> tuple[tuple[str, tuple[int, ...]], ...]: ...

    @property
    def output_capacity(self) -> tuple[tuple[str, tuple[int, ...]], ...]: ...

    def shape_for(self, name: str) -> tuple[int, ...] | None: ...

_log = logging.getLogger(__name__)

#: What onnxruntime raises when it refuses a graph (its pybind errors derive from Exception).
ORT_ERRORS: tuple[type[BaseException], ...] = (
    ort_state.Fail,
    ort_state.InvalidGraph,
    ort_state.InvalidArgument,
    ort_state.InvalidProtobuf,
    ort_state.NotImplemented,
    ort_state.RuntimeException,
    ort_state.NoSuchFile,
    ort_state.EPFail,
    RuntimeError,
    ValueError,
)


_READ_ERRORS: tuple[type[Exception], ...] = (OSError, *PARSE_ERRORS)


def load_source(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    """A private copy of the source model. ModelLoadError when it cannot be read."""
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    path = Path(model)
    try:
        loaded = onnx.load(str(path))
    except _READ_ERRORS as exc:
        raise ModelLoadError(f"cannot read ONNX model {str(path)!r}: {exc}") from exc
    if not loaded.graph.node and not loaded.graph.output:
        raise ModelLoadError(f"{str(path)!r} holds no ONNX graph")
    return loaded


def session(model_bytes: bytes, *, optimize: bool = True) -> ort.InferenceSession:
    """A CPU onnxruntime session; raises the onnxruntime error unchanged."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def _tensor_elem(vi: onnx.ValueInfoProto, what: str) -> int:
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedError(
            f"{what} {vi.name!r} is a {kind or 'untyped value'}, not a tensor; copyless compiles "
            "models whose inputs and outputs are tensors"
        )
    return int(vi.type.tensor_type.elem_type)


def check_interface(model: onnx.ModelProto) -> None:
    """UnsupportedError for non-tensor inputs/outputs or dtypes outside DataType."""
    for vi in graph_inputs(model.graph):
        dtype_of_elem(_tensor_elem(vi, "input"), f"input {vi.name!r}")
    for vi in model.graph.output:
        dtype_of_elem(_tensor_elem(vi, "output"), f"output {vi.name!r}")


@dataclass(frozen=True, slots=True)
class FixedInputs:
    """The CPU views of the model inputs after fixing every dim, and the batch size."""

    infos: tuple[NpuTensorInfo, ...]
    batch_size: int


def fix_inputs(model: onnx.ModelProto, options: ShapeOptions) -> FixedInputs:
    """Give every input dim a value, in place: batch dims -> N, others from input_shapes."""
    inputs = graph_inputs(model.graph)
    names = {vi.name for vi in inputs}
    for name, _ in options.input_shapes:
        if name not in names:
            raise UnsupportedError(f"input_shapes names {name!r}, not an input of the model")
    batch_symbols = {
        vi.type.tensor_type.shape.dim[0].dim_param
        for vi in inputs
        if vi.type.tensor_type.shape.dim and not _static(vi.type.tensor_type.shape.dim[0])
    }
    symbolic_batch = bool(batch_symbols)
    n = options.batch_size
    infos = []
    for vi in inputs:
        dims = _input_dims(vi, options, batch_symbols if symbolic_batch else set(), n)
        if (
            not symbolic_batch
            and n > 1
            and dims
            and dims[0] != n
            and not options.shape_for(vi.name)
        ):
            raise UnsupportedError(
                f"input {vi.name!r} has a fixed batch dim of {dims[0]}; batch_size={n} needs a "
                "model with a symbolic batch dim (or give input_shapes)"
            )
        shape = vi.type.tensor_type.shape
        del shape.dim[:]
        for d in dims:
            shape.dim.add().dim_value = d
        dtype = dtype_of_elem(vi.type.tensor_type.elem_type, f"input {vi.name!r}")
        infos.append(
            NpuTensorInfo(
                vi.name,
                dtype,
                TensorDirection.INPUT,
                TensorType.CPU,
                cpu_layout_for(len(dims)),
                dims,
            )
        )
    batch = n if (symbolic_batch or n > 1) else 1
    return FixedInputs(tuple(infos), batch)


def _static(dim: Any) -> bool:
    return bool(dim.HasField("dim_value"))


def _input_dims(
    vi: onnx.ValueInfoProto, options: ShapeOptions, batch_symbols: set[str], n: int
) -> tuple[int, ...]:
    if not vi.type.tensor_type.HasField("shape"):
        given = options.shape_for(vi.name)
        if given is None:
            raise UnsupportedError(
                f"input {vi.name!r} has no shape (unknown rank); give input_shapes={{"
                f"{vi.name!r}: (...)}} (CLI --input-shape {vi.name}=D0xD1x...)"
            )
        return given
    declared = list(vi.type.tensor_type.shape.dim)
    given = options.shape_for(vi.name)
    if given is not None:
        if len(given) != len(declared):
            raise UnsupportedError(
                f"input_shapes[{vi.name!r}] has rank {len(given)}, "
                f"the model's input rank {len(declared)}"
            )
        for i, (d, g) in enumerate(zip(declared, given, strict=True)):
            if _static(d) and d.dim_value != g:
                raise UnsupportedError(
                    f"input_shapes[{vi.name!r}] dim {i} is {g}, the model fixes it to {d.dim_value}"
                )
        return given
    dims = []
    for i, d in enumerate(declared):
        if _static(d):
            dims.append(int(d.dim_value))
        elif i == 0 or (d.dim_param and d.dim_param in batch_symbols):
            dims.append(n)
        else:
            label = f" ({d.dim_param!r})" if d.dim_param else ""
            raise UnsupportedError(
                f"input {vi.name!r} dim {i}{label} is symbolic; fix it with input_shapes="
                f"{{{vi.name!r}: (...)}} (CLI --input-shape {vi.name}=D0xD1x...)"
            )
    return tuple(dims)


@dataclass(frozen=True, slots=True)
class Probed:
    """dtype and dims of one tensor as onnxruntime resolved them: None for an unknown dim,
    ``dims`` None for an unknown rank."""

    dtype: DataType
    dims: tuple[int | None, ...] | None

    @property
    def static(self) -> bool:
        return self.dims is not None and None not in self.dims

    @property
    def dynamic_dims(self) -> tuple[int, ...]:
        if self.dims is None:
            return (0,)
        return tuple(i for i, d in enumerate(self.dims) if d is None)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape with unknown dims recorded as -1 (an unknown rank as ``(-1,)``)."""
        if self.dims is None:
            return (-1,)
        return tuple(-1 if d is None else d for d in self.dims)


_ORT_TYPES: dict[str, DataType] = {
    "tensor(bool)": DataType.BOOLEAN,
    "tensor(int8)": DataType.INT8,
    "tensor(uint8)": DataType.UINT8,
    "tensor(int16)": DataType.INT16,
    "tensor(uint16)": DataType.UINT16,
    "tensor(bfloat16)": DataType.BF16,
    "tensor(float16)": DataType.FP16,
    "tensor(int32)": DataType.INT32,
    "tensor(uint32)": DataType.UINT32,
    "tensor(float)": DataType.FLOAT32,
    "tensor(int64)": DataType.INT64,
    "tensor(uint64)": DataType.UINT64,
}


def probe(model: onnx.ModelProto, extra: tuple[str, ...] = ()) -> dict[str, Probed]:
    """Shapes of the graph outputs and of ``extra`` tensors, resolved by onnxruntime.

    Declared output shapes are dropped first so a stale symbolic dim cannot hide what the
    fixed inputs determine. UnsupportedError when onnxruntime refuses the model.
    """
    work = onnx.ModelProto()
    work.CopyFrom(model)
    work.ir_version = min(work.ir_version or IR_VERSION, IR_VERSION)
    del work.graph.value_info[:]
    declared = {vi.name for vi in work.graph.output}
    for vi in work.graph.output:
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    for name in extra:
        if name not in declared:
            work.graph.output.append(onnx.ValueInfoProto(name=name))
    try:
        sess = session(work.SerializeToString(), optimize=False)
    except ORT_ERRORS as exc:
        raise UnsupportedError(f"onnxruntime cannot load the model: {exc}") from exc
    out: dict[str, Probed] = {}
    inferred: dict[str, tuple[int | None, ...] | None] | None = None
    for arg in sess.get_outputs():
        dtype = _ORT_TYPES.get(arg.type)
        if dtype is None:
            raise UnsupportedError(
                f"output {arg.name!r} has type {arg.type}, which copyless cannot describe "
                "(outputs must be tensors of a DataType)"
            )
        dims = tuple(d if isinstance(d, int) and d >= 0 else None for d in (arg.shape or []))
        if dims:
            out[arg.name] = Probed(dtype, dims)
            continue
        # onnxruntime says [] for scalars and for unknown ranks alike: ask onnx's inference
        inferred = _onnx_dims(work) if inferred is None else inferred
        out[arg.name] = Probed(dtype, inferred.get(arg.name))
    return out


def _onnx_dims(model: onnx.ModelProto) -> dict[str, tuple[int | None, ...] | None]:
    """Dims of every graph output per onnx's own shape inference (None: unknown)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except capacity.INFER_ERRORS:
        return {}
    out: dict[str, tuple[int | None, ...] | None] = {}
    for vi in inferred.graph.output:
        if not vi.type.tensor_type.HasField("shape"):
            out[vi.name] = None
            continue
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in dims)
    return out


#: Operands that set an op's output shape by their values, where onnxruntime's static
#: inference guesses when they are not constants (Squeeze of unknown axes: every 1-dim
#: squeezed; Split of unknown sizes: equal parts) instead of leaving the dims unknown.
_SHAPE_OPERANDS = {"Squeeze": 1, "Unsqueeze": 1, "Split": 1}


def _value_shaped(model: onnx.ModelProto) -> set[str]:
    """Graph outputs whose shape depends on the values of a graph input through one of
    :data:`_SHAPE_OPERANDS` (onnxruntime's static shape for them is a guess)."""
    graph = model.graph
    fed = {vi.name for vi in graph_inputs(graph)}  # values known only at run time
    shaped: set[str] = set()
    for node in graph.node:  # a source model's nodes are in topological order
        index = _SHAPE_OPERANDS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        ins = set(node.input)
        by_value = index is not None and len(node.input) > index and node.input[index] in fed
        if by_value or ins & shaped:
            shaped.update(node.output)
        if ins & fed and node.op_type not in ("Shape", "Size"):
            fed.update(node.output)
    return shaped & {vi.name for vi in graph.output}


def output_infos(
    model: onnx.ModelProto, probed: dict[str, Probed], options: ShapeOptions
) -> tuple[tuple[NpuTensorInfo, ...], dict[str, tuple[int, ...]]]:
    """CPU views of the outputs (data-dependent dims hold their capacity, or -1), and the
    data-dependent dims of each output that has some."""
    outputs = list(model.graph.output)
    given = dict(options.output_capacity)
    for name in given:
        if name not in probed or name not in {vi.name for vi in outputs}:
            raise OptionError(f"output_capacity names {name!r}, not an output of the model")
    guessed = _value_shaped(model)
    pending = [vi.name for vi in outputs if not probed[vi.name].static or vi.name in guessed]
    derived = capacity.derive(model) if pending else {}
    infos, unknown = [], {}
    for vi in outputs:
        p = probed[vi.name]
        shape: tuple[int, ...] = p.shape
        dynamic: tuple[int, ...] = ()
        if vi.name in pending:
            dims = None if vi.name in guessed else p.dims
            shape, dynamic = capacity.output_shape(dims, derived.get(vi.name))
        if vi.name in given:
            rank_known = p.dims is not None or derived.get(vi.name) is not None
            shape, dynamic = capacity.chosen(vi.name, shape, dynamic, given[vi.name], rank_known)
        infos.append(
            NpuTensorInfo(
                vi.name,
                p.dtype,
                TensorDirection.OUTPUT,
                TensorType.CPU,
                cpu_layout_for(len(shape)),
                shape,
            )
        )
        if dynamic:
            unknown[vi.name] = dynamic
    return tuple(infos), unknown
