"""A small builder for the nodes a postprocess appends to a graph (a DAG, unlike the
straight :class:`~copyless.model._graph.NodeChain` of the view folds)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .._graph import NameScope

__all__ = ["Ops"]


class Ops:
    """Appends nodes and constants under one name prefix; :meth:`commit` writes them into
    the graph. Every tensor and node name is fresh (:class:`NameScope`)."""

    def __init__(self, graph: onnx.GraphProto, prefix: str, opset: int = 13) -> None:
        self.graph = graph
        self.opset = opset  # the model's default-domain opset: some ops changed form
        self.scope = NameScope(graph)
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, value: Any, dtype: Any = np.float32, tag: str = "const") -> str:
        """A constant initializer holding ``value`` as ``dtype``."""
        name = self.scope.fresh(f"{self.prefix}/{tag}")
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def i64(self, *values: int, tag: str = "i64") -> str:
        """A 1-D int64 constant (shapes, axes, indices)."""
        return self.const(list(values), np.int64, tag)

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        """One node with one output; returns the output's name."""
        return self.multi(op_type, list(inputs), 1, **attrs)[0]

    def multi(self, op_type: str, inputs: list[str], outputs: int, **attrs: Any) -> list[str]:
        """One node with ``outputs`` outputs; returns their names."""
        tag = op_type.lower()
        names = [self.scope.fresh(f"{self.prefix}/{tag}") for _ in range(outputs)]
        node = helper.make_node(
            op_type, inputs, names, name=self.scope.fresh(f"{self.prefix}/{op_type}"), **attrs
        )
        self.nodes.append(node)
        return names

    def emit(self, tensor: str, name: str) -> None:
        """Make ``tensor`` available under the exact ``name`` (an Identity node); the caller
        checks that ``name`` is free."""
        self.nodes.append(
            helper.make_node(
                "Identity", [tensor], [name], name=self.scope.fresh(f"{self.prefix}/{name}")
            )
        )

    def commit(self) -> None:
        self.graph.node.extend(self.nodes)
        self.graph.initializer.extend(self.initializers)
        self.nodes, self.initializers = [], []
