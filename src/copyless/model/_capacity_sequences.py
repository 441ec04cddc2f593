"""Shape rules of :mod:`._capacity` for sequence-typed values (SequenceConstruct, SequenceAt,
ConcatFromSequence, SplitToSequence, ...): exact while the sequence's structure is known
(which items, in which order), else bounded by its length and a bound of every item."""

from __future__ import annotations

import onnx

from ._capacity_rules import Value, _axis, concat, ints, rule, tensor
from ._graph import node_attr
from ._intervals import (
    UNKNOWN,
    UNKNOWN_DIM,
    Abstract,
    Interval,
    SequenceValue,
    add,
    ceildiv,
    exact,
    is_exact,
    join_abstract,
    mul,
    sub,
)


def of_items(items: tuple[Abstract, ...]) -> SequenceValue:
    element = None
    for item in items:
        element = item if element is None else join_abstract(element, item)
    return SequenceValue(items, exact(len(items)), element)


def _sequence(value: Value) -> SequenceValue:
    if isinstance(value, SequenceValue):
        return value
    return SequenceValue(None, UNKNOWN_DIM, None)


def _position(value: Value, count: Interval) -> int | None:
    """An exact position into a sequence of exactly ``count`` items (negative from the end)."""
    at = ints(value) if value is not None else None
    if at is None or len(at) != 1 or not is_exact(count):
        return None
    n = int(count[0] or 0)
    return at[0] + n if at[0] < 0 else at[0]


@rule("SequenceEmpty")
def _empty(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    return [SequenceValue((), exact(0), None)]


@rule("SequenceConstruct")
def _construct(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    return [of_items(tuple(tensor(v) for v in ins))]


@rule("SequenceInsert")
def _insert(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    seq, item = _sequence(ins[0]), tensor(ins[1])
    given = len(ins) > 2 and ins[2] is not None
    at = _position(ins[2], seq.count) if given else int(seq.count[0] or 0)
    if seq.items is not None and at is not None:
        return [of_items((*seq.items[:at], item, *seq.items[at:]))]
    element = item if seq.element is None else join_abstract(seq.element, item)
    return [SequenceValue(None, add(seq.count, exact(1)), element)]


@rule("SequenceErase")
def _erase(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    seq = _sequence(ins[0])
    given = len(ins) > 1 and ins[1] is not None
    at = _position(ins[1], seq.count) if given else int(seq.count[0] or 0) - 1
    if seq.items is not None and at is not None:
        return [of_items(seq.items[:at] + seq.items[at + 1 :])]
    lo, hi = sub(seq.count, exact(1))
    return [SequenceValue(None, (max(lo or 0, 0), hi), seq.element)]


@rule("SequenceAt")
def _at(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    seq = _sequence(ins[0])
    at = _position(ins[1], seq.count)
    if seq.items is not None and at is not None and 0 <= at < len(seq.items):
        return [seq.items[at]]
    return [seq.element or UNKNOWN]


@rule("SequenceLength")
def _length(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    return [Abstract((), (_sequence(ins[0]).count,))]


@rule("ConcatFromSequence")
def _concat_from(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    seq = _sequence(ins[0])
    axis, new_axis = node_attr(node, "axis"), node_attr(node, "new_axis", 0)
    if seq.items is not None:
        items = [_unsqueezed(t, axis) for t in seq.items] if new_axis else list(seq.items)
        return [concat(items, axis)]
    element = seq.element
    if element is None or element.dims is None:
        return [None]
    if new_axis:
        element = _unsqueezed(element, axis)
    dims = list(element.dims)  # type: ignore[arg-type]
    at = _axis(axis, len(dims))
    dims[at] = (0, mul(seq.count, dims[at])[1])
    return [Abstract(tuple(dims))]


def _unsqueezed(item: Abstract, axis: int) -> Abstract:
    if item.dims is None:
        return UNKNOWN
    dims = list(item.dims)
    dims.insert(_axis(axis, len(dims) + 1), (1, 1))
    return Abstract(tuple(dims))


@rule("SplitToSequence")
def _split_to(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x = tensor(ins[0])
    if x.dims is None:
        return [SequenceValue(None, UNKNOWN_DIM, None)]
    axis = _axis(node_attr(node, "axis", 0), len(x.dims))
    whole = x.dims[axis]
    split = tensor(ins[1]) if len(ins) > 1 and ins[1] is not None else None
    if split is None:  # pieces of 1, the axis kept or dropped
        keep = node_attr(node, "keepdims", 1)
        piece = x.dims[:axis] + ((1, 1),) * keep + x.dims[axis + 1 :]
        return [_pieces(Abstract(piece), whole)]
    sizes = split.exact_values()
    if sizes is not None and split.dims == ():  # one size: equal pieces, the last shorter
        return [_equal_pieces(x, axis, sizes[0])]
    if sizes is not None:
        return [of_items(tuple(_with_dim(x, axis, exact(s)) for s in sizes))]
    count = exact(len(split.values)) if split.values is not None else UNKNOWN_DIM
    return [SequenceValue(None, count, _with_dim(x, axis, (0, whole[1])))]


def _pieces(piece: Abstract, count: Interval) -> SequenceValue:
    if is_exact(count):
        return of_items((piece,) * int(count[0] or 0))
    return SequenceValue(None, count, piece)


def _equal_pieces(x: Abstract, axis: int, size: int) -> SequenceValue:
    whole = x.dims[axis]  # type: ignore[index]
    if not is_exact(whole) or size <= 0:
        count = ceildiv(whole, exact(max(size, 1)))
        return SequenceValue(None, count, _with_dim(x, axis, (0, size)))
    total = int(whole[0] or 0)
    sizes = [min(size, total - start) for start in range(0, total, size)]
    return of_items(tuple(_with_dim(x, axis, exact(s)) for s in sizes))


def _with_dim(x: Abstract, axis: int, size: Interval) -> Abstract:
    dims = x.dims or ()
    return Abstract((*dims[:axis], size, *dims[axis + 1 :]))
