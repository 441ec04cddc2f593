"""Splitting a graph into an accelerated partition (``par_0``) and a CPU partition (``par_1``).

The design is one cut by data dependence. The CPU partition is a set of *seed* nodes and
every node that (transitively) reads their outputs; ``par_0`` is all the rest, which is
therefore closed under its own inputs and runs first. Seeds are chosen by one option:

* ``cpu_ops=("Softmax", "TopK")``: every node of those op types is a seed (and goes to CPU);
* ``cpu_partition_after="name"``: the node of that name, or the node producing the tensor
  of that name, stays on ``par_0`` and everything reading its outputs goes to CPU;
* ``cpu_tail=True``: as ``cpu_partition_after`` the last ``Conv`` node of the graph.

``Constant`` nodes the CPU side reads are copied into ``par_1`` rather than crossing the cut
(exporters such as Paddle's emit every weight as one). Tensors crossing the cut become
intermediates (produced by ``par_0``, read by ``par_1``,
allocated once by the runner). Model inputs are only ever read by ``par_0``: a model input
the CPU side needs is forwarded through an ``Identity`` in ``par_0``, and so is a model
output of ``par_0`` that ``par_1`` also reads, so intermediates never alias boundary tensors.
Model outputs may come from either partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import onnx
from onnx import helper

from ..types import OptionError
from ._graph import NameScope, graph_inputs, node_reads, rename_reads
from ._options import CompileOptions


@dataclass(frozen=True, slots=True)
class Cut:
    """Where the graph splits: node indices on the CPU side, the crossing tensors, and the
    ``Constant`` nodes (indices) both sides get a copy of."""

    cpu_nodes: frozenset[int]
    crossing: tuple[str, ...]
    shared: frozenset[int] = frozenset()


def find_cut(graph: onnx.GraphProto, options: CompileOptions) -> Cut:
    """The CPU node set for the partition option; OptionError when it selects nothing."""
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    seeds, include_seeds = _seeds(graph, options, producer)
    cpu: set[int] = set()
    for i, node in enumerate(graph.node):
        if i in seeds and include_seeds:
            cpu.add(i)
            continue
        for name in node_reads(node):
            j = producer.get(name)
            if j is not None and (j in cpu or j in seeds):
                cpu.add(i)
                break
    if not cpu:
        raise OptionError(f"the CPU partition is empty: no node follows {_describe(options)}")
    if len(cpu) == len(graph.node):
        raise OptionError(f"{_describe(options)} puts the whole model on the CPU partition")
    crossing: list[str] = []
    shared: set[int] = set()
    for i in sorted(cpu):
        for name in node_reads(graph.node[i]):
            j = producer.get(name)
            if (j is not None and j in cpu) or name in crossing or _is_const(graph, name):
                continue
            if j is not None and graph.node[j].op_type == "Constant" and not graph.node[j].input:
                shared.add(j)
            else:
                crossing.append(name)
    return Cut(frozenset(cpu), tuple(crossing), frozenset(shared))


def _describe(options: CompileOptions) -> str:
    if options.cpu_ops:
        return f"cpu_ops={list(options.cpu_ops)}"
    if options.cpu_tail:
        return "cpu_tail (the last Conv)"
    return f"cpu_partition_after={options.cpu_partition_after!r}"


def _is_const(graph: onnx.GraphProto, name: str) -> bool:
    return any(t.name == name for t in graph.initializer)


def _seeds(
    graph: onnx.GraphProto, options: CompileOptions, producer: dict[str, int]
) -> tuple[set[int], bool]:
    nodes = graph.node
    if options.cpu_ops:
        wanted = set(options.cpu_ops)
        found = {i for i, node in enumerate(nodes) if node.op_type in wanted}
        if not found:
            raise OptionError(f"cpu_ops={sorted(wanted)}: the model has no node of those types")
        return found, True
    if options.cpu_tail:
        convs = [i for i, node in enumerate(nodes) if node.op_type == "Conv"]
        if not convs:
            raise OptionError("cpu_tail: the model has no Conv node")
        return {convs[-1]}, False
    target = options.cpu_partition_after
    for i, node in enumerate(nodes):
        if node.name and node.name == target:
            return {i}, False
    if target in producer:
        return {producer[target]}, False
    raise OptionError(f"cpu_partition_after={target!r}: no node or node output of that name")


@dataclass(frozen=True, slots=True)
class Part:
    """One partition's graph and its boundary names, in graph order."""

    model: onnx.ModelProto
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def forward_boundaries(model: onnx.ModelProto, cut: Cut) -> Cut:
    """Route crossing model inputs/outputs through Identity nodes on ``par_0`` (in place).

    Each Identity goes right after the node producing its source (first for a graph
    input), so the graph stays topologically sorted. Returns the cut for the new graph.
    """
    graph = model.graph
    boundary = {vi.name for vi in graph_inputs(graph)} | {vi.name for vi in graph.output}
    scope = NameScope(graph)
    nodes = []
    for node in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        nodes.append(copy)
    cpu_nodes = [nodes[i] for i in sorted(cut.cpu_nodes)]
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    after: dict[int, list[onnx.NodeProto]] = {}
    crossing = []
    for name in cut.crossing:
        if name not in boundary:
            crossing.append(name)
            continue
        fwd = scope.fresh(f"{name}__to_cpu")
        after.setdefault(producer.get(name, -1), []).append(
            helper.make_node("Identity", [name], [fwd], name=scope.fresh(fwd))
        )
        rename_reads(cpu_nodes, name, fwd)
        crossing.append(fwd)
    ordered: list[tuple[onnx.NodeProto, bool]] = [(n, False) for n in after.get(-1, [])]
    for i, node in enumerate(nodes):
        ordered.append((node, i in cut.cpu_nodes))
        ordered.extend((n, False) for n in after.get(i, []))
    del graph.node[:]
    graph.node.extend(n for n, _ in ordered)
    cpu = frozenset(i for i, (_, on_cpu) in enumerate(ordered) if on_cpu)
    old_index = {id(n): i for i, n in enumerate(nodes)}
    shared = frozenset(i for i, (n, _) in enumerate(ordered) if old_index[id(n)] in cut.shared)
    return Cut(cpu, tuple(crossing), shared)


def split(model: onnx.ModelProto, cut: Cut, infos: dict[str, onnx.ValueInfoProto]) -> list[Part]:
    """Build ``par_0`` and ``par_1`` from a graph and its cut. ``infos`` types every
    boundary and crossing tensor."""
    graph = model.graph
    npu_nodes = [n for i, n in enumerate(graph.node) if i not in cut.cpu_nodes]
    npu_reads = {r for n in npu_nodes for r in node_reads(n)} | {vi.name for vi in graph.output}
    npu_nodes = [  # a Constant copied to par_1 stays on par_0 only if par_0 reads it
        n
        for i, n in enumerate(graph.node)
        if i not in cut.cpu_nodes and (i not in cut.shared or n.output[0] in npu_reads)
    ]
    cpu_nodes = [n for i, n in enumerate(graph.node) if i in cut.cpu_nodes or i in cut.shared]
    made_by_cpu = {out for n in cpu_nodes for out in n.output}
    model_inputs = tuple(vi.name for vi in graph_inputs(graph))
    outs0 = tuple(vi.name for vi in graph.output if vi.name not in made_by_cpu)
    outs1 = tuple(vi.name for vi in graph.output if vi.name in made_by_cpu)
    par0 = _sub(model, "par_0", npu_nodes, model_inputs, (*outs0, *cut.crossing), infos)
    par1 = _sub(model, "par_1", cpu_nodes, cut.crossing, outs1, infos)
    return [
        Part(par0, model_inputs, (*outs0, *cut.crossing)),
        Part(par1, cut.crossing, outs1),
    ]


def _sub(
    model: onnx.ModelProto,
    name: str,
    nodes: Iterable[onnx.NodeProto],
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
    infos: dict[str, onnx.ValueInfoProto],
) -> onnx.ModelProto:
    nodes = list(nodes)
    reads = {r for n in nodes for r in node_reads(n)} | set(outputs)
    graph = helper.make_graph(
        nodes,
        f"{model.graph.name or 'model'}/{name}",
        [infos[i] for i in inputs],
        [infos[o] for o in outputs],
        initializer=[t for t in model.graph.initializer if t.name in reads],
        sparse_initializer=[t for t in model.graph.sparse_initializer if t.values.name in reads],
    )
    sub = helper.make_model(graph, opset_imports=list(model.opset_import))
    sub.ir_version = model.ir_version
    sub.functions.extend(model.functions)
    return sub
