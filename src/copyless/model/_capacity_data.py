"""Shape rules of :mod:`._capacity` for ops whose output shape comes from the data (NonZero,
NonMaxSuppression, TopK, Compress, Unique), from input *values* (Expand, ConstantOfShape,
Range, OneHot, Tile, Pad, Split), and for the matrix products and reductions in between."""

from __future__ import annotations

import onnx

from ._capacity_rules import Value, _axis, broadcast, ints, rule, tensor
from ._graph import node_attr
from ._intervals import (
    UNKNOWN_DIM,
    Abstract,
    Interval,
    add,
    ceildiv,
    dim,
    exact,
    is_exact,
    lower,
    mul,
    product,
    sub,
)


def _scalar(value: Value) -> Interval:
    """The interval of a one-element integer input (UNKNOWN_DIM's open range when unknown)."""
    values = tensor(value).values
    return values[0] if values is not None and len(values) == 1 else (None, None)


@rule("NonZero")
def _nonzero(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    dims = tensor(ins[0]).dims
    if dims is None:
        return [Abstract((UNKNOWN_DIM, UNKNOWN_DIM))]
    return [Abstract((exact(len(dims)), (0, product(dims)[1])))]


@rule("NonMaxSuppression")
def _nms(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    """[selected, 3]: at most min(max_output_boxes_per_class, boxes) per batch and class."""
    boxes, scores = tensor(ins[0]).dims, tensor(ins[1]).dims
    if boxes is None or scores is None or len(boxes) != 3 or len(scores) != 3:
        return [Abstract((UNKNOWN_DIM, exact(3)))]
    per_class = boxes[1]
    if len(ins) > 2 and ins[2] is not None:
        per_class = lower(per_class, dim(_scalar(ins[2])))
    else:
        per_class = (0, 0)  # max_output_boxes_per_class defaults to 0: nothing selected
    most = product([boxes[0], scores[1], per_class])
    return [Abstract(((0, most[1]), exact(3)))]


@rule("TopK")
def _topk(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x = tensor(ins[0])
    if x.dims is None:
        return [None, None]
    axis = _axis(node_attr(node, "axis", -1), len(x.dims))
    k = node_attr(node, "k")  # opset 1 attribute, later an input
    want = exact(k) if k is not None else dim(_scalar(ins[1]))
    dims = (*x.dims[:axis], lower(want, x.dims[axis]), *x.dims[axis + 1 :])
    return [Abstract(dims), Abstract(dims)]


@rule("Compress")
def _compress(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x, cond = tensor(ins[0]).dims, tensor(ins[1]).dims
    length = cond[0] if cond is not None and len(cond) == 1 else UNKNOWN_DIM
    axis = node_attr(node, "axis")
    if x is None:
        return [None] if axis is not None else [Abstract(((0, length[1]),))]
    if axis is None:
        return [Abstract(((0, lower(product(x), length)[1]),))]
    axis = _axis(axis, len(x))
    return [Abstract((*x[:axis], (0, lower(x[axis], length)[1]), *x[axis + 1 :]))]


@rule("Unique")
def _unique(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x = tensor(ins[0]).dims
    axis = node_attr(node, "axis")
    if x is None:
        return [None, None, None, None] if axis is not None else [Abstract((UNKNOWN_DIM,))] * 4
    if axis is None:
        total = product(x)
        found = Abstract(((0, total[1]),))
        return [found, found, Abstract((total,)), found]
    axis = _axis(axis, len(x))
    count: Interval = (0, x[axis][1])
    return [
        Abstract((*x[:axis], count, *x[axis + 1 :])),
        Abstract((count,)),
        Abstract((x[axis],)),
        Abstract((count,)),
    ]


@rule("Expand")
def _expand(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x, shape = tensor(ins[0]), tensor(ins[1])
    if shape.values is None:
        return [None]
    return [Abstract(broadcast([x.dims, tuple(dim(v) for v in shape.values)]))]


@rule("ConstantOfShape")
def _constant_of_shape(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    shape = tensor(ins[0])
    if shape.values is not None:
        return [Abstract(tuple(dim(v) for v in shape.values))]
    if shape.dims is not None and len(shape.dims) == 1 and is_exact(shape.dims[0]):
        return [Abstract((UNKNOWN_DIM,) * int(shape.dims[0][0] or 0))]
    return [None]


@rule("Range")
def _range(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    start, limit, delta = (_scalar(v) for v in ins[:3])
    if not is_exact(delta) or delta[0] == 0:
        return [Abstract((UNKNOWN_DIM,))]
    step = exact(abs(int(delta[0] or 0)))
    span = sub(limit, start) if (delta[0] or 0) > 0 else sub(start, limit)
    return [Abstract((dim(ceildiv(span, step)),))]


@rule("OneHot")
def _one_hot(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    indices = tensor(ins[0]).dims
    if indices is None:
        return [None]
    axis = _axis(node_attr(node, "axis", -1), len(indices) + 1)
    depth = _scalar(ins[1])
    return [Abstract((*indices[:axis], dim(depth), *indices[axis:]))]


@rule("Tile")
def _tile(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x, repeats = tensor(ins[0]), tensor(ins[1])
    if x.dims is None or repeats.values is None or len(repeats.values) != len(x.dims):
        return [None]
    return [Abstract(tuple(mul(d, dim(r)) for d, r in zip(x.dims, repeats.values, strict=True)))]


@rule("Pad")
def _pad(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x = tensor(ins[0])
    pads = node_attr(node, "pads")
    amounts = tuple(exact(p) for p in pads) if pads else tensor(ins[1]).values
    if x.dims is None or amounts is None:
        return [None]
    rank = len(x.dims)
    axes = ints(ins[3]) if len(ins) > 3 and ins[3] is not None else tuple(range(rank))
    if axes is None or len(amounts) != 2 * len(axes):
        return [None]
    dims = list(x.dims)
    for k, a in enumerate(axes):
        a = _axis(a, rank)
        dims[a] = dim(add(add(dims[a], amounts[k]), amounts[k + len(axes)]))
    return [Abstract(tuple(dims))]


@rule("Split")
def _split(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x = tensor(ins[0])
    n = len(node.output)
    if x.dims is None:
        return [None] * n
    axis = _axis(node_attr(node, "axis", 0), len(x.dims))
    given = len(node.input) > 1 and bool(node.input[1])  # sizes from a tensor
    sizes = node_attr(node, "split") or (ints(ins[1]) if given and ins[1] is not None else None)
    whole = x.dims[axis]
    if sizes is not None:
        parts = [exact(s) for s in sizes]
    elif given:  # sizes known at run time only: each part holds at most the whole
        parts = [(0, whole[1])] * n
    elif is_exact(whole) and (whole[0] or 0) % n == 0:
        parts = [exact((whole[0] or 0) // n)] * n
    else:
        parts = [(0, ceildiv(whole, exact(n))[1])] * n
    return [Abstract((*x.dims[:axis], p, *x.dims[axis + 1 :])) for p in parts]


@rule("MatMul", "MatMulInteger", "QLinearMatMul")
def _matmul(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    b_index = 3 if node.op_type == "QLinearMatMul" else 1
    a, b = tensor(ins[0]).dims, tensor(ins[b_index]).dims
    if a is None or b is None or not a or not b:
        return [None]
    if len(a) == 1 and len(b) == 1:
        return [Abstract(())]
    if len(a) == 1:
        return [Abstract(b[:-2] + b[-1:])]
    if len(b) == 1:
        return [Abstract(a[:-1])]
    batch = broadcast([a[:-2], b[:-2]])
    return [None] if batch is None else [Abstract((*batch, a[-2], b[-1]))]


@rule("Gemm")
def _gemm(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    a, b = tensor(ins[0]).dims, tensor(ins[1]).dims
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [None]
    rows = a[1] if node_attr(node, "transA", 0) else a[0]
    cols = b[0] if node_attr(node, "transB", 0) else b[1]
    return [Abstract((rows, cols))]


_REDUCE = (
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
)


def _product_of_dims(values: tuple[Interval, ...]) -> tuple[Interval, ...] | None:
    """The product of non-negative values (e.g. a Shape's): the element count it gives."""
    if all(v[0] is not None and v[0] >= 0 for v in values):
        return (product(values),)
    return None


@rule(*_REDUCE)
def _reduce(node: onnx.NodeProto, ins: list[Value]) -> list[Value]:
    x = tensor(ins[0])
    if x.dims is None:
        return [None]
    rank = len(x.dims)
    if node.op_type in ("ArgMax", "ArgMin"):
        axes: tuple[int, ...] | None = (node_attr(node, "axis", 0),)
    else:
        axes = node_attr(node, "axes")
        if axes is None and len(ins) > 1 and ins[1] is not None:
            axes = ints(ins[1])
            if axes is None:
                return [None]
    if not axes:
        if node_attr(node, "noop_with_empty_axes", 0):
            return [Abstract(x.dims)]
        axes = tuple(range(rank))
    gone = {_axis(a, rank) for a in axes}
    keep = node_attr(node, "keepdims", 1)
    dims = tuple((1, 1) if i in gone else d for i, d in enumerate(x.dims) if keep or i not in gone)
    values = None
    if node.op_type == "ReduceProd" and rank == 1 and not keep and x.values is not None:
        values = _product_of_dims(x.values)
    return [Abstract(dims, values)]
