"""Which OpenVINO port holds each graph tensor of a partition, where OpenVINO's ONNX reader
renames, merges or drops them.

OpenVINO names each port by the ONNX tensors it carries, but three graphs break the one-to-one
naming the contexts bind by:

* an output that *is* an input (``Identity``, ``Dropout`` at inference, ``Max``/``Sum`` of one
  input, ``SequenceAt`` of a constructed sequence): the reader connects the ``Result``
  straight to the ``Parameter``, whose names become the output's (the input's own name may
  be lost: ``Dropout(x) -> y`` leaves one Parameter named ``y``). OpenVINO then writes nothing
  into a caller's output tensor: the context copies the input into it after each run
  (:class:`Ports` ``aliases``);
* an input OpenVINO never reads (no node consumes it, or it holds no element: an empty
  ``axes``): the reader drops its Parameter and binding it is skipped (``dropped``);
* an input a node reads but OpenVINO's conversion of that node ignores (``LSTM``'s
  peepholes ``P``): its answers would be wrong whatever the input holds, so the partition
  is refused (UnsupportedError naming the node), never run.

A renamed input is found among the Parameters no partition input names, in graph order,
with the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx

from ..model import Partition
from ..types import ModelLoadError, UnsupportedError
from ._openvino_graph import declared_shape


@dataclass(frozen=True, slots=True)
class Ports:
    """Port indices by graph tensor name; ``dropped`` inputs have none; ``aliases`` maps an
    output to the input OpenVINO passes through as that output."""

    inputs: dict[str, int]
    outputs: dict[str, int]
    dropped: frozenset[str] = frozenset()
    aliases: dict[str, str] = field(default_factory=dict)


def find_ports(compiled: Any, partition: Partition, graph: onnx.ModelProto) -> Ports:
    """The :class:`Ports` of ``partition`` (its ONNX ``graph``) in OpenVINO's ``compiled``."""
    declared = {vi.name for vi in graph.graph.input}
    unknown = [name for name in partition.inputs if name not in declared]
    if unknown:
        raise ModelLoadError(f"{partition.name}: the graph has no input named {unknown[0]!r}")
    in_names = [set(port.get_names()) for port in compiled.inputs]
    inputs: dict[str, int] = {}
    missing = []
    for name in partition.inputs:
        index = next((i for i, names in enumerate(in_names) if name in names), None)
        if index is None:
            missing.append(name)
        else:
            inputs[name] = index
    if missing:
        inputs.update(_renamed(compiled, partition, graph, missing, set(inputs.values())))
    dropped = frozenset(n for n in partition.inputs if n not in inputs)
    _check_dropped(partition, graph, dropped)
    outputs = _output_indices(compiled, partition)
    by_port = {index: name for name, index in inputs.items()}
    aliases = {}
    for name, index in outputs.items():
        out_names = set(compiled.outputs[index].get_names())
        for port, names in enumerate(in_names):
            if port in by_port and out_names & names:
                aliases[name] = by_port[port]
    return Ports(inputs, outputs, dropped, aliases)


def _renamed(
    compiled: Any, partition: Partition, graph: onnx.ModelProto, missing: list[str], taken: set[int]
) -> dict[str, int]:
    """Inputs OpenVINO renamed (after the output they pass through): the Parameters no input
    names, in graph order, matched by shape."""
    free = [i for i in range(len(compiled.inputs)) if i not in taken]
    found: dict[str, int] = {}
    for name in missing:
        for index in free:
            shape = compiled.inputs[index].get_partial_shape()
            if shape.is_static and list(shape.to_shape()) == declared_shape(graph.graph, name):
                found[name] = index
                free.remove(index)
                break
    return found


def _check_dropped(partition: Partition, graph: onnx.ModelProto, dropped: frozenset[str]) -> None:
    """UnsupportedError for a dropped input that a node reads and that holds data."""
    for name in sorted(dropped):
        shape = declared_shape(graph.graph, name)
        if shape is not None and 0 in shape:
            continue  # no element: nothing for OpenVINO to ignore
        readers = [n for n in graph.graph.node if name in n.input]
        if readers:
            node = readers[0]
            raise UnsupportedError(
                f"{partition.name}: OpenVINO ignores input {name!r} of {node.op_type} node "
                f"{node.name or node.output[0]!r} (its conversion drops it): its answers would "
                "be wrong, so it does not run this model (onnxruntime does)"
            )


def _output_indices(compiled: Any, partition: Partition) -> dict[str, int]:
    indices: dict[str, int] = {}
    for name in partition.outputs:
        for index, port in enumerate(compiled.outputs):
            if name in port.get_names():
                indices[name] = index
                break
        else:
            raise ModelLoadError(
                f"{partition.name}: OpenVINO's graph has no tensor named {name!r}"
            )
    return indices
