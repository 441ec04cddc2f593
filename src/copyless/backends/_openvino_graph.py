"""What the OpenVINO backend checks and adjusts in a partition's graph before OpenVINO runs it.

* :func:`check_graph`: a malformed node is refused before ``read_model`` (OpenVINO's reader
  trusts its input and can crash the process), and so is a node OpenVINO 2026 converts but
  computes otherwise than ONNX says (:data:`WRONG_ON_OPENVINO`, found by the ONNX node tests:
  ``python benchmarks/node_conformance.py``): its answers would be wrong, so the model is not run
  on OpenVINO (UnsupportedError naming the node; onnxruntime runs it).
* :func:`stable_topk`: ONNX's TopK keeps equal values in index order; OpenVINO's converted
  TopK does not unless its ``stable`` attribute is set, which this sets.
* :func:`reason`: the line of an OpenVINO error that says what failed (its first line is
  "Exception from src/inference/src/cpp/core.cpp:105:").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx

from ..model import Partition, node_attr
from ..types import ModelLoadError, UnsupportedError

_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
           onnx.TensorProto.DOUBLE}  # fmt: skip
_SIGNED = {onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
           onnx.TensorProto.INT64}  # fmt: skip


def _resize(node: onnx.NodeProto, _graph: onnx.GraphProto) -> str | None:
    if node_attr(node, "antialias", 0):
        return "ignores antialias=1 (samples without the low-pass filter)"
    if node_attr(node, "exclude_outside", 0) and node_attr(node, "mode", b"nearest") == b"cubic":
        return "ignores exclude_outside=1 for cubic"
    if node_attr(node, "keep_aspect_ratio_policy", b"stretch") != b"stretch":
        return "ignores keep_aspect_ratio_policy (gives the stretched size)"
    return None


def _space_to_depth(node: onnx.NodeProto, _graph: onnx.GraphProto) -> str | None:
    if node_attr(node, "mode", b"DCR") == b"CRD":
        return "ignores mode=CRD (orders channels as DCR)"
    return None


def _bit_shift(node: onnx.NodeProto, graph: onnx.GraphProto) -> str | None:
    if _elem_type(graph, node.input[0]) in _SIGNED:
        return "shifts signed integers otherwise (negative values, shifts >= the width)"
    return None


def _tile(node: onnx.NodeProto, graph: onnx.GraphProto) -> str | None:
    constants = {t.name for t in graph.initializer}
    constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    if len(node.input) > 1 and node.input[1] not in constants:
        return "returns uninitialised memory for repeats given at run time"
    return None


def _attention(node: onnx.NodeProto, _graph: onnx.GraphProto) -> str | None:
    windows = (node_attr(node, "left_window_size", -1), node_attr(node, "right_window_size", -1))
    if any(w >= 0 for w in windows):
        return "ignores left_window_size/right_window_size (attends outside the window)"
    return None


def _reduce_max(node: onnx.NodeProto, graph: onnx.GraphProto) -> str | None:
    shape = declared_shape(graph, node.input[0])
    floats = _elem_type(graph, node.input[0]) in _FLOATS
    if floats and shape is not None and 0 in shape:
        return "reduces an empty tensor to the lowest finite value, not to -inf"
    return None


def _dynamic_quantize(_node: onnx.NodeProto, _graph: onnx.GraphProto) -> str | None:
    return "rounds some values to the neighbouring integer"


Rule = Callable[[onnx.NodeProto, onnx.GraphProto], "str | None"]

#: Ops OpenVINO 2026.4 converts but computes otherwise than ONNX (each measured against
#: onnx's expected outputs): op type -> the rule saying when and why.
WRONG_ON_OPENVINO: dict[str, Rule] = {
    "Resize": _resize,
    "SpaceToDepth": _space_to_depth,
    "BitShift": _bit_shift,
    "Tile": _tile,
    "Attention": _attention,
    "DynamicQuantizeLinear": _dynamic_quantize,
    "ReduceMax": _reduce_max,
}


def check_graph(partition: Partition) -> onnx.ModelProto:
    """The partition's graph, parsed. ModelLoadError for a malformed node: each node is checked
    against its schema (``onnx.checker.check_node``: arity, attributes) and its inputs against
    the names the graph defines (not the graph-level rules: the compiler's graphs need not be
    sorted topologically, which both engines accept). UnsupportedError for a node
    :data:`WRONG_ON_OPENVINO` names. Costs a parse of the graph."""
    try:
        model = onnx.load_from_string(bytes(partition.onnx_bytes))
        context = onnx.checker.C.CheckerContext()
        context.ir_version = model.ir_version
        context.opset_imports = {o.domain: o.version for o in model.opset_import}
        graph = model.graph
        defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        defined |= {out for node in graph.node for out in node.output}
        subgraphs = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for node in graph.node:
            # A node with subgraphs (If, Loop, Scan) is checked by name only: check_node
            # checks its bodies as whole graphs, where outer-scope names look undefined.
            if not any(a.type in subgraphs for a in node.attribute):
                onnx.checker.check_node(node, context)
            missing = [name for name in node.input if name and name not in defined]
            if missing:
                raise ValueError(f"node {node.name or node.op_type!r} reads undefined {missing}")
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelLoadError(
            f"{partition.name}: a malformed graph, not given to OpenVINO: {first}"
        ) from exc
    _check_known_wrong(partition, model.graph)
    return model


def _check_known_wrong(partition: Partition, graph: onnx.GraphProto) -> None:
    for node in graph.node:
        rule = WRONG_ON_OPENVINO.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        why = rule(node, graph) if rule is not None else None
        if why is not None:
            raise UnsupportedError(
                f"{partition.name}: OpenVINO {why} in {node.op_type} node "
                f"{node.name or node.output[0]!r}: its answers would be wrong, so it does not "
                "run this model (onnxruntime does)"
            )


def needs_adjusting(graph: onnx.ModelProto) -> bool:
    """Whether :func:`stable_topk` has anything to do (the model then cannot be compiled
    from the file OpenVINO's cache reads)."""
    return any(node.op_type == "TopK" for node in graph.graph.node)


def stable_topk(model: Any) -> None:
    """Set ``stable`` on every sorting TopK of OpenVINO's ``model``, in place: equal values in
    index order, as ONNX's TopK returns them (a TopK that does not sort, as Hardmax's, has
    no order to keep, and OpenVINO refuses ``stable`` there)."""
    for op in model.get_ordered_ops():
        if op.get_type_name() != "TopK":
            continue
        attributes = op.get_attributes()
        if "stable" in attributes and str(attributes.get("sort", "")).lower() != "none":
            op.set_attribute("stable", True)


def reason(exc: BaseException) -> str:
    """The lines of an OpenVINO error that say what failed, joined in one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for marker in ("No conversion rule found for operations:", "Conversion is failed for:"):
        found = [line for line in lines if line.startswith(("-- " + marker, marker))]
        if found:
            detail = [line for line in lines if line.startswith(("If ", "While validating"))]
            return "; ".join([found[0].lstrip("- "), *detail[-1:]])
    useful = [
        line for line in lines
        if not line.startswith(("Exception from", "Check ", "To facilitate", "FrontEnd API"))
    ]  # fmt: skip
    return (useful or lines or [type(exc).__name__])[-1]


def _elem_type(graph: onnx.GraphProto, name: str) -> int | None:
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.name == name and vi.type.HasField("tensor_type"):
            return int(vi.type.tensor_type.elem_type)
    for init in graph.initializer:
        if init.name == name:
            return int(init.data_type)
    return None


def declared_shape(graph: onnx.GraphProto, name: str) -> list[int] | None:
    """The declared static shape of ``name`` (an input, a typed value or an initializer)."""
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                return [d.dim_value for d in dims]
            return None
    for init in graph.initializer:
        if init.name == name:
            return list(init.dims)
    return None
