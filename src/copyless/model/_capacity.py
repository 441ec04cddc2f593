"""Capacities of outputs whose shape depends on the data: the bounds the compiler reports.

:func:`derive` interprets the graph once, in order, over intervals (see :mod:`._intervals`):
every tensor gets a shape whose dims are ``[lo, hi]`` bounds, and small integer tensors
(shapes, sizes, ``k``, axes) the bounds of their values, so a bound flows from the op that
makes a shape data-dependent (NonZero of a ``[3,4]`` input: ``[2, 0..12]``;
NonMaxSuppression: ``[0..batch*classes*min(max_output_boxes_per_class, boxes), 3]``; TopK,
Compress, Unique) through shape arithmetic (Shape, Gather, Concat, Add...) into the ops a
shape drives (Expand, ConstantOfShape, Range, Reshape, Tile, Pad, OneHot), and through
sequence-typed values (SequenceConstruct, SplitToSequence, ConcatFromSequence...).
Ops without a rule take onnx's shape inference (static dims exact, others unbounded);
every rule is sound, so a derived capacity always holds what onnxruntime produces.

:func:`output_shape` merges that with onnxruntime's own static shapes into what an info
reports: static dims as they are, data-dependent ones as their bound, or -1 where none is
known (``(-1,)`` for an unknown rank).
"""

from __future__ import annotations

import logging

import onnx
from onnx import numpy_helper

from ..types import OptionError
from . import _capacity_data, _capacity_sequences  # noqa: F401 - they register their rules
from ._capacity_rules import RULES, Value, tensor
from ._graph import PARSE_ERRORS
from ._intervals import (
    MAX_VALUES,
    UNKNOWN,
    UNKNOWN_DIM,
    Abstract,
    Dims,
    Interval,
    exact,
    is_exact,
    known_dims,
)

_log = logging.getLogger(__name__)

_INT_ELEMS = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
INFER_ERRORS: tuple[type[Exception], ...] = (onnx.shape_inference.InferenceError, *PARSE_ERRORS)
_RULE_ERRORS = (ArithmeticError, IndexError, KeyError, TypeError, ValueError)


def derive(model: onnx.ModelProto) -> dict[str, Dims | None]:
    """Bounds of every graph output's dims (None: rank unknown), inputs as the graph fixes
    them (the compiler fixes them first)."""
    inferred = _inferred(model)
    values: dict[str, Value] = {}
    for vi in model.graph.input:
        values[vi.name] = _declared(vi)
    for init in model.graph.initializer:
        values[init.name] = _constant(init)
    for node in model.graph.node:
        ins = [values.get(name) if name else None for name in node.input]
        outs = _apply(node, ins)
        for i, name in enumerate(node.output):
            if name:
                out = outs[i] if i < len(outs) else None
                values[name] = _tightened(out, inferred.get(name))
    return {vi.name: tensor(values.get(vi.name)).dims for vi in model.graph.output}


def output_shape(
    probed: tuple[int | None, ...] | None, derived: Dims | None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the shape an info reports, the indices of its data-dependent dims) from
    onnxruntime's dims (None: unknown, a None rank: unknown rank) and the derived bounds."""
    if probed is None:
        if derived is None:
            return (-1,), (0,)
        probed = (None,) * len(derived)
    if derived is not None and len(derived) != len(probed):
        derived = None  # the two disagree on the rank: trust onnxruntime's
    shape, dynamic = [], []
    for i, d in enumerate(probed):
        bound = derived[i] if derived is not None else UNKNOWN_DIM
        if d is not None:
            shape.append(d)
        elif is_exact(bound):
            shape.append(int(bound[0] or 0))
        else:
            shape.append(-1 if bound[1] is None else bound[1])
            dynamic.append(i)
    return tuple(shape), tuple(dynamic)


def _apply(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    if node.op_type == "Constant":
        return [_constant_node(node)]
    fn = RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if fn is None:
        return []
    try:
        return fn(node, ins)
    except _RULE_ERRORS as exc:  # a graph onnxruntime will refuse anyway: no bound then
        _log.debug("no capacity rule result for %s %r: %s", node.op_type, node.name, exc)
        return []


def _declared(vi: onnx.ValueInfoProto) -> Abstract:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return UNKNOWN
    dims = tuple(
        exact(d.dim_value) if d.HasField("dim_value") else UNKNOWN_DIM
        for d in vi.type.tensor_type.shape.dim
    )
    return Abstract(dims)


def _constant(proto: onnx.TensorProto) -> Abstract:
    dims = known_dims(proto.dims)
    count = 1
    for d in proto.dims:
        count *= int(d)
    if proto.data_type not in _INT_ELEMS or count > MAX_VALUES:
        return dims
    array = numpy_helper.to_array(proto).reshape(-1)
    return Abstract(dims.dims, tuple(exact(int(v)) for v in array))


def _constant_node(node: onnx.NodeProto) -> Abstract:
    for a in node.attribute:
        if a.name == "value":
            return _constant(a.t)
        if a.name == "value_int":
            return Abstract((), (exact(int(a.i)),))
        if a.name == "value_ints":
            return Abstract((exact(len(a.ints)),), tuple(exact(int(v)) for v in a.ints))
    return UNKNOWN


def _inferred(model: onnx.ModelProto) -> dict[str, Abstract]:
    """onnx's shape inference for every value it types (static dims exact). Declared shapes
    of outputs and intermediates are dropped first: a model may declare the shape one run
    produced (the onnx backend test cases do), which is no bound."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    del work.graph.value_info[:]
    for vi in work.graph.output:
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(work, data_prop=True)
    except INFER_ERRORS as exc:
        _log.debug("onnx shape inference failed: %s", exc)
        return {}
    graph = inferred.graph
    return {vi.name: _declared(vi) for vi in (*graph.value_info, *graph.output)}


def _tightened(out: Value, inferred: Abstract | None) -> Value:
    """A rule's result with onnx's static dims filled in (or onnx's alone without a rule)."""
    if out is None:
        return inferred or UNKNOWN
    if not isinstance(out, Abstract) or inferred is None or inferred.dims is None:
        return out
    if out.dims is None:
        return Abstract(inferred.dims, out.values)
    if len(out.dims) != len(inferred.dims):
        return out
    dims = tuple(b if is_exact(b) else a for a, b in zip(out.dims, inferred.dims, strict=True))
    return Abstract(dims, out.values)


__all__ = ["Interval", "chosen", "derive", "output_shape"]


def chosen(
    name: str,
    shape: tuple[int, ...],
    dynamic: tuple[int, ...],
    given: tuple[int, ...],
    rank_known: bool,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shape and data-dependent dims once the caller's capacity (``output_capacity``)
    replaces the derived one. OptionError for a static output, another rank (when the rank
    is known) or a static dim of another size."""
    if not dynamic:
        raise OptionError(f"output_capacity[{name!r}]: the output has a static shape {list(shape)}")
    if not rank_known:
        return given, tuple(range(len(given)))
    if len(given) != len(shape):
        raise OptionError(
            f"output_capacity[{name!r}] = {list(given)} has rank {len(given)}; the output's "
            f"shape is {list(shape)} (data-dependent dims {list(dynamic)})"
        )
    for i, (d, g) in enumerate(zip(shape, given, strict=True)):
        if i not in dynamic and d != g:
            raise OptionError(
                f"output_capacity[{name!r}] dim {i} is {g}; the output fixes it to {d}"
            )
    return given, dynamic
