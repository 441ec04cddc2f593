"""Shape rules of :mod:`._capacity`: for each ONNX op, the abstract outputs of abstract inputs.

A rule gets the node and its inputs (``None`` for an omitted optional input) and returns one
value per output it can bound; ``None`` for an output leaves it to onnx's shape inference.
Rules stay sound: an interval always holds every value the op can produce at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx

from ._graph import node_attr
from ._intervals import (
    UNKNOWN,
    UNKNOWN_DIM,
    Abstract,
    Dims,
    Interval,
    SequenceValue,
    add,
    dim,
    exact,
    floordiv,
    is_exact,
    join,
    lower,
    mul,
    neg,
    product,
    scalar,
    small_enough,
    sub,
    upper,
)

Value = Abstract | SequenceValue | None
Rule = Callable[[onnx.NodeProto, list[Value]], list[Value]]
RULES: dict[str, Rule] = {}


def rule(*ops: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn

    return register


def tensor(value: Value) -> Abstract:
    return value if isinstance(value, Abstract) else UNKNOWN


def ints(value: Value) -> tuple[int, ...] | None:
    """The exact integer values of an input (an axes/k/repeats tensor), or None."""
    return tensor(value).exact_values()


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# -- same shape, broadcasting ------------------------------------------------------------
_UNARY = (
    "Identity", "Cast", "CastLike", "Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Log",
    "Sqrt", "Floor", "Ceil", "Round", "Sign", "Not", "Clip", "Softmax", "LogSoftmax",
    "Hardmax", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "Erf", "HardSigmoid",
    "HardSwish", "Softplus", "Softsign", "Reciprocal", "IsNaN", "IsInf", "Sin", "Cos",
    "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Dropout",
    "BatchNormalization", "InstanceNormalization", "LayerNormalization", "LRN", "CumSum",
    "Trilu", "Mish", "QuantizeLinear", "DequantizeLinear", "Shrink", "ThresholdedRelu",
    "BitwiseNot", "Bernoulli", "RandomNormalLike", "RandomUniformLike", "EyeLike",
)


@rule(*_UNARY)
def _unary(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x = tensor(ins[0])
    keeps_values = node.op_type in ("Identity", "Neg", "Abs") or (
        node.op_type == "Cast" and node_attr(node, "to") in _INT_TYPES
    )
    values = x.values if keeps_values else None
    if node.op_type == "Neg" and values is not None:
        values = tuple(neg(v) for v in values)
    if node.op_type == "Abs" and values is not None:
        values = tuple(_abs(v) for v in values)
    return [Abstract(x.dims, values)]


_INT_TYPES = (onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16)


def _abs(v: Interval) -> Interval:
    lo, hi = v
    if lo is not None and lo >= 0:
        return v
    if hi is not None and hi <= 0:
        return (-hi, None if lo is None else -lo)
    top = None if lo is None or hi is None else max(-lo, hi)
    return (0, top)


def broadcast(shapes: Sequence[Dims | None]) -> Dims | None:
    """The numpy broadcast of shapes: exact where the inputs are, else bounded by them."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes if s is not None), default=0)
    out: list[Interval] = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if s is not None and len(s) - rank + i >= 0]
        real = [d for d in dims if d != (1, 1)]
        if not real:
            out.append((1, 1))
        elif len(real) == 1 or all(d == real[0] for d in real):
            out.append(real[0])
        else:
            hi = real[0][1]
            for d in real[1:]:
                hi = None if hi is None or d[1] is None else max(hi, d[1])
            out.append((0, hi))
    return tuple(out)


_ARITH: dict[str, Callable[[Interval, Interval], Interval]] = {
    "Add": add,
    "Sub": sub,
    "Mul": mul,
    "Div": lambda a, b: floordiv(a, b, trunc=True),
    "Max": upper,
    "Min": lower,
}


@rule(
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Equal", "Less",
    "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "BitShift",
    "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu",
)  # fmt: skip
def _elementwise(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    xs = [tensor(v) for v in ins if v is not None]
    dims = broadcast([x.dims for x in xs])
    return [Abstract(dims, _arith_values(node.op_type, xs, dims))]


def _arith_values(op: str, xs: list[Abstract], dims: Dims | None) -> tuple[Interval, ...] | None:
    fn = _ARITH.get(op)
    if fn is None or len(xs) != 2 or dims is None or not small_enough(dims):
        return None
    a, b = xs[0].values, xs[1].values
    if a is None or b is None:
        return None
    n = max(len(a), len(b))
    if len(a) not in (1, n) or len(b) not in (1, n) or len(dims) > 1:
        return None
    return tuple(fn(a[i % len(a)], b[i % len(b)]) for i in range(n))


# -- layout ops --------------------------------------------------------------------------
@rule("Transpose")
def _transpose(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    dims = tensor(ins[0]).dims
    if dims is None:
        return [None]
    perm = node_attr(node, "perm") or list(reversed(range(len(dims))))
    return [Abstract(tuple(dims[p] for p in perm))]


@rule("Concat")
def _concat(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    return [concat([tensor(v) for v in ins], node_attr(node, "axis", 0))]


def concat(xs: Sequence[Abstract], axis: int) -> Abstract:
    if not xs or any(x.dims is None for x in xs) or len({x.rank for x in xs}) != 1:
        return UNKNOWN
    rank = xs[0].rank or 0
    axis = _axis(axis, rank)
    dims = []
    for i in range(rank):
        column = [x.dims[i] for x in xs]  # type: ignore[index]
        if i == axis:
            total: Interval = (0, 0)
            for d in column:
                total = add(total, d)
            dims.append(total)
        else:
            dims.append(next((d for d in column if is_exact(d)), column[0]))
    values = None
    if rank == 1 and all(x.values is not None for x in xs):
        values = tuple(v for x in xs for v in x.values)  # type: ignore[union-attr]
    return Abstract(tuple(dims), values)


@rule("Gather")
def _gather(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    data, idx = tensor(ins[0]), tensor(ins[1])
    if data.dims is None or idx.dims is None:
        return [None]
    axis = _axis(node_attr(node, "axis", 0), len(data.dims))
    dims = data.dims[:axis] + idx.dims + data.dims[axis + 1 :]
    values = None
    picks = idx.exact_values()
    if data.values is not None and len(data.dims) == 1:
        if picks is not None and all(-len(data.values) <= p < len(data.values) for p in picks):
            values = tuple(data.values[p] for p in picks)
        elif idx.dims is not None and small_enough(dims):
            union = data.values[0]
            for v in data.values[1:]:
                union = join(union, v)
            values = tuple(union for _ in range(product(dims)[0] or 0))
    return [Abstract(dims, values)]


@rule("GatherND")
def _gather_nd(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    data, idx = tensor(ins[0]).dims, tensor(ins[1]).dims
    if data is None or idx is None or not idx or not is_exact(idx[-1]):
        return [None]
    batch = node_attr(node, "batch_dims", 0)
    return [Abstract(idx[:-1] + data[batch + int(idx[-1][0] or 0) :])]


@rule("GatherElements")
def _gather_elements(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    return [Abstract(tensor(ins[1]).dims)]


@rule("ScatterND", "ScatterElements", "Scatter")
def _scatter(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    return [Abstract(tensor(ins[0]).dims)]


@rule("Unsqueeze")
def _unsqueeze(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x = tensor(ins[0])
    axes = node_attr(node, "axes") or (ints(ins[1]) if len(ins) > 1 else None)
    if x.dims is None or axes is None:
        return [None]
    rank = len(x.dims) + len(axes)
    wanted = sorted(_axis(a, rank) for a in axes)
    dims = list(x.dims)
    for a in wanted:
        dims.insert(a, (1, 1))
    return [Abstract(tuple(dims), x.values)]


@rule("Squeeze")
def _squeeze(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x = tensor(ins[0])
    if x.dims is None:
        return [None]
    given = len(node.input) > 1 and bool(node.input[1])
    axes = node_attr(node, "axes") or (ints(ins[1]) if given and ins[1] is not None else None)
    if axes is None and given:
        return [None]  # axes known at run time only: so is the rank
    if axes is None:
        if not all(is_exact(d) for d in x.dims):
            return [None]  # which dims are 1 is known only at run time
        gone = {i for i, d in enumerate(x.dims) if d == (1, 1)}
    else:
        gone = {_axis(a, len(x.dims)) for a in axes}
    return [Abstract(tuple(d for i, d in enumerate(x.dims) if i not in gone), x.values)]


@rule("Flatten")
def _flatten(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    dims = tensor(ins[0]).dims
    if dims is None:
        return [None]
    axis = _axis(node_attr(node, "axis", 1), len(dims))
    return [Abstract((product(dims[:axis]), product(dims[axis:])))]


@rule("Reshape")
def _reshape(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x, shape = tensor(ins[0]), tensor(ins[1])
    if x.dims is None or shape.dims is None or len(shape.dims) != 1:
        return [None]
    values = shape.values
    if values is None:  # the rank is known, the dims are not
        if not is_exact(shape.dims[0]):
            return [None]
        values = ((None, None),) * int(shape.dims[0][0] or 0)
    total = product(x.dims)
    dims = _reshaped(values, x.dims, total, bool(node_attr(node, "allowzero", 0)))
    if total[0]:  # no dim of a non-empty tensor exceeds its element count
        dims = [(d[0], total[1] if d[1] is None else min(d[1], total[1] or d[1])) for d in dims]
    return [Abstract(tuple(dims), x.values)]


def _reshaped(
    values: tuple[Interval, ...], dims: Dims, total: Interval, keep_zero: bool
) -> list[Interval]:
    out: list[Interval | None] = []  # None: the one inferred dim (-1)
    for i, v in enumerate(values):
        copied = dims[i] if i < len(dims) else UNKNOWN_DIM
        if v == (-1, -1):
            out.append(None)
        elif v[0] is None or v[0] < 0:
            out.append(UNKNOWN_DIM)  # might be -1: inferred at run time
        elif v == (0, 0) and not keep_zero:
            out.append(copied)
        elif v[0] == 0 and not keep_zero:
            out.append(join(dim(v), copied))  # might be 0: copies the input's dim
        else:
            out.append(dim(v))
    if None in out:
        others = product([d for d in out if d is not None])
        hi = None if total[1] is None or not others[0] else total[1] // others[0]
        lo = floordiv(total, others)[0] if others[0] and others[1] else 0
        out[out.index(None)] = (max(lo or 0, 0), hi)
    return [d or UNKNOWN_DIM for d in out]


@rule("Shape")
def _shape(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    dims = tensor(ins[0]).dims
    if dims is None:
        return [None]
    start, end = node_attr(node, "start", 0), node_attr(node, "end", len(dims))
    picked = dims[slice(start, end)]
    return [Abstract((exact(len(picked)),), picked)]


@rule("Size")
def _size(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    dims = tensor(ins[0]).dims
    return [scalar(product(dims) if dims is not None else UNKNOWN_DIM)]


@rule("Slice")
def _slice(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x = tensor(ins[0])
    if x.dims is None:
        return [None]
    given = [i < len(ins) and ins[i] is not None for i in range(5)]
    starts, ends = ints(ins[1]), ints(ins[2])
    axes = ints(ins[3]) if given[3] else None
    steps = ints(ins[4]) if given[4] else ()
    if not given[3] and starts is not None:
        axes = tuple(range(len(starts)))
    known = None not in (starts, ends, axes, steps)  # every parameter's value
    rank = len(x.dims)
    dims = list(x.dims)
    for k, a in enumerate(range(rank) if axes is None else [_axis(a, rank) for a in axes]):
        d = dims[a]
        if known and is_exact(d):
            cut = slice(starts[k], ends[k], steps[k] if steps else 1)  # type: ignore[index]
            dims[a] = exact(len(range(int(d[0] or 0))[cut]))
        else:
            dims[a] = (0, d[1])  # never more than the input has
    values = None
    if known and rank == 1 and x.values is not None and is_exact(dims[0]):
        values = x.values[slice(starts[0], ends[0], steps[0] if steps else 1)]  # type: ignore[index]
    return [Abstract(tuple(dims), values)]
