"""Small helpers over ONNX graphs: dtype tables, tensor uses, renaming, node builders.

The compiler edits graphs in place on its own copies of the user's model, never on the
caller's ``ModelProto``.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..types import DataType, MemoryLayout, UnsupportedError

#: ONNX element type of every copyless DataType (the only element types copyless compiles).
ELEM_OF: dict[DataType, int] = {
    DataType.BOOLEAN: TensorProto.BOOL,
    DataType.INT8: TensorProto.INT8,
    DataType.UINT8: TensorProto.UINT8,
    DataType.INT16: TensorProto.INT16,
    DataType.UINT16: TensorProto.UINT16,
    DataType.BF16: TensorProto.BFLOAT16,
    DataType.FP16: TensorProto.FLOAT16,
    DataType.INT32: TensorProto.INT32,
    DataType.UINT32: TensorProto.UINT32,
    DataType.FLOAT32: TensorProto.FLOAT,
    DataType.INT64: TensorProto.INT64,
    DataType.UINT64: TensorProto.UINT64,
}
DTYPE_OF: dict[int, DataType] = {elem: dtype for dtype, elem in ELEM_OF.items()}

#: protobuf's parse error (looked up at run time: google.protobuf ships no type stubs).
PROTOBUF_ERRORS: tuple[type[Exception], ...] = (
    importlib.import_module("google.protobuf.message").DecodeError,
)

#: What reading a serialized ONNX model can raise.
PARSE_ERRORS: tuple[type[Exception], ...] = (*PROTOBUF_ERRORS, ValueError, RuntimeError)

#: ONNX IR version written into every compiled graph (onnxruntime 1.31 rejects newer ones).
IR_VERSION = 10


def dtype_of_elem(elem: int, what: str) -> DataType:
    """The DataType of an ONNX element type; UnsupportedError naming ``what`` otherwise."""
    try:
        return DTYPE_OF[elem]
    except KeyError:
        name = TensorProto.DataType.Name(elem) if elem in TensorProto.DataType.values() else elem
        raise UnsupportedError(
            f"{what} has element type {name}, which copyless does not support "
            f"(supported: {', '.join(d.name for d in ELEM_OF)})"
        ) from None


def cpu_layout_for(rank: int) -> MemoryLayout:
    """The CPU-view layout copyless assumes for an ONNX tensor of this rank."""
    return {2: MemoryLayout.NC, 3: MemoryLayout.NCH, 4: MemoryLayout.NCHW}.get(
        rank, MemoryLayout.GENERIC
    )


def default_opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset (1 when it declares none)."""
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return int(opset.version)
    return 1


def node_attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """The value of ``node``'s attribute ``name`` (a Python value: int, float, bytes, list,
    tensor proto, graph), or ``default`` when the node does not set it."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def graph_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Real inputs: old models also list their initializers as graph inputs."""
    inits = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    return [vi for vi in graph.input if vi.name not in inits]


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def _outer_refs(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads from enclosing scopes."""
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    refs: set[str] = set()
    for node in graph.node:
        for name in itertools.chain(node.input, *(_outer_refs(g) for g in _subgraphs(node))):
            if name and name not in defined:
                refs.add(name)
        defined.update(node.output)
    refs.update(vi.name for vi in graph.output if vi.name not in defined)
    return refs


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Every tensor a node reads: its inputs and what its subgraphs take from outer scope."""
    names = [name for name in node.input if name]
    for sub in _subgraphs(node):
        names.extend(sorted(_outer_refs(sub)))
    return names


def rename_reads(nodes: Iterable[onnx.NodeProto], old: str, new: str) -> None:
    """Make every read of ``old`` (subgraph outer-scope reads included) read ``new``."""
    for node in nodes:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for sub in _subgraphs(node):
            if old in _outer_refs(sub):
                rename_reads(sub.node, old, new)
                for vi in sub.output:
                    if vi.name == old:
                        vi.name = new


def all_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name of the top-level graph."""
    names = {vi.name for vi in itertools.chain(graph.input, graph.output, graph.value_info)}
    names.update(t.name for t in graph.initializer)
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names


class NameScope:
    """Hands out tensor/node names that do not collide with the graph's own."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self._taken = all_names(graph) | {n.name for n in graph.node}

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self._taken:
            name, i = f"{base}_{i}", i + 1
        self._taken.add(name)
        return name


def tensor_value_info(
    name: str, dtype: DataType, shape: Sequence[int | str | None] | None
) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, ELEM_OF[dtype], None if shape is None else shape)


class NodeChain:
    """Builds a straight chain of nodes from one tensor to another (the folded conversions)."""

    def __init__(self, scope: NameScope, start: str, prefix: str) -> None:
        self.scope = scope
        self.current = start
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, value: Any, dtype: Any, tag: str) -> str:
        name = self.scope.fresh(f"{self.prefix}/{tag}")
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, *extra_inputs: str, **attrs: Any) -> None:
        out = self.scope.fresh(f"{self.prefix}/{op_type.lower()}")
        node = helper.make_node(
            op_type,
            [self.current, *extra_inputs],
            [out],
            name=self.scope.fresh(f"{self.prefix}/{op_type}"),
            **attrs,
        )
        self.nodes.append(node)
        self.current = out

    def finish(self, target: str) -> None:
        """Make the chain end in ``target`` (an Identity when the chain is empty)."""
        if not self.nodes:
            self.op("Identity")
        self.nodes[-1].output[0] = target
        self.current = target
