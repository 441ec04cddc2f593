"""Folding the RGBx input's normalisation and channel drop into the first convolution.

The generic RGBx input fold (:func:`copyless.model.folding.fold_input`) starts the graph with
``Cast -> Slice (drop x) -> Transpose -> Mul -> Add``: five passes over the frame before the
model's first layer. When the input feeds exactly one ``Conv`` with constant weights, the
per-channel affine ``x * scale + bias`` and the padding channel fold into that convolution:

* weights ``W'[o, c] = W[o, c] * scale[c]`` for c < 3 and ``W'[o, 3] = 0`` (the x channel is
  read and ignored), bias ``B'[o] = B[o] + sum_c,k W[o, c, k] * bias[c]``;
* the convolution's zero padding, which is zero in *normalised* units, becomes a ``Pad`` of
  the uint8 frame with the pixel value that normalises to zero (the mean): only when that
  value is the same integer for the three channels (else the generic fold is used).

What is left is ``[Pad] -> Cast -> Transpose`` and the convolution, exact up to float
rounding (the tests compare with the unfolded graph). Nothing is copied at run time that the
generic fold did not copy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import numpy_helper

from .graph import NameScope

_log = logging.getLogger(__name__)

#: How close to an integer (pixel units) the padding value must be.
_PIXEL_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True)
class StemConv:
    """The convolution the input feeds, and what folding changes in it."""

    node: onnx.NodeProto
    weights: npt.NDArray[np.float32]
    bias: npt.NDArray[np.float32]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    pad_value: int | None  # uint8 pixel value that normalises to 0; None: no padding needed


def find_stem_conv(
    graph: onnx.GraphProto, name: str, scale: tuple[float, ...], bias: tuple[float, ...]
) -> StemConv | None:
    """The single float ``Conv`` reading graph input ``name`` as its data, if it can take the
    folding; else None (the caller keeps the generic fold)."""
    readers = [n for n in graph.node if name in n.input]
    if len(readers) != 1 or _read_in_subgraph(graph, name):
        return None
    node = readers[0]
    if (
        node.op_type != "Conv"
        or node.domain not in ("", "ai.onnx")
        or list(node.input).index(name) != 0
        or list(node.input).count(name) != 1
    ):
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    if attrs.get("group", 1) != 1 or auto_pad not in (b"NOTSET", "NOTSET"):
        return None
    inits = {i.name: i for i in graph.initializer}
    if node.input[1] not in inits or (len(node.input) > 2 and node.input[2] not in inits):
        return None
    weights = numpy_helper.to_array(inits[node.input[1]])
    if weights.dtype != np.float32 or weights.ndim != 4 or weights.shape[1] != 3:
        return None
    if len(node.input) > 2 and node.input[2]:
        conv_bias = numpy_helper.to_array(inits[node.input[2]])
        if conv_bias.dtype != np.float32 or conv_bias.shape != (weights.shape[0],):
            return None
    else:
        conv_bias = np.zeros(weights.shape[0], np.float32)
    pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
    if len(pads) != 4 or min(pads) < 0:
        return None
    pad_value = None
    if any(pads):
        pad_value = _zero_pixel(scale, bias)
        if pad_value is None:
            return None
    return StemConv(node, weights, conv_bias, (pads[0], pads[1], pads[2], pads[3]), pad_value)


def fold_into_stem(
    graph: onnx.GraphProto,
    scope: NameScope,
    stem: StemConv,
    scale: tuple[float, ...],
    bias: tuple[float, ...],
) -> list[onnx.NodeProto]:
    """Rewrite the convolution for raw NCHW4 pixels; returns the nodes that must precede it
    (reading the graph input ``stem.node.input[0]``), the last writing the conv's input."""
    node, prefix = stem.node, f"copyless/stem/{stem.node.input[0]}"
    frame = node.input[0]
    s = np.asarray(scale, np.float64)
    b = np.asarray(bias, np.float64)
    w = stem.weights.astype(np.float64)
    folded = np.zeros((w.shape[0], 4, *w.shape[2:]), np.float32)
    folded[:, :3] = (w * s[None, :, None, None]).astype(np.float32)
    folded_bias = (stem.bias + (w * b[None, :, None, None]).sum(axis=(1, 2, 3))).astype(np.float32)
    w_name, b_name = scope.fresh(f"{prefix}/weights"), scope.fresh(f"{prefix}/bias")
    old = [n for n in node.input[1:] if n]
    graph.initializer.extend(
        [numpy_helper.from_array(folded, w_name), numpy_helper.from_array(folded_bias, b_name)]
    )
    nodes: list[onnx.NodeProto] = []
    current = frame
    if stem.pad_value is not None:
        top, left, bottom, right = stem.pads
        pads_name, value_name = scope.fresh(f"{prefix}/pads"), scope.fresh(f"{prefix}/value")
        graph.initializer.extend(
            [
                numpy_helper.from_array(
                    np.array([0, top, left, 0, 0, bottom, right, 0], np.int64), pads_name
                ),
                numpy_helper.from_array(np.array(stem.pad_value, np.uint8), value_name),
            ]
        )
        current = _node(nodes, scope, prefix, "Pad", [current, pads_name, value_name])
    current = _node(nodes, scope, prefix, "Cast", [current], to=onnx.TensorProto.FLOAT)
    current = _node(nodes, scope, prefix, "Transpose", [current], perm=[0, 3, 1, 2])
    node.input[:] = [current, w_name, b_name]
    for attr in node.attribute:
        if attr.name == "pads":
            attr.ints[:] = [0, 0, 0, 0]
    _drop_unused(graph, old)
    _log.debug("normalisation folded into %s (pad value %s)", node.name, stem.pad_value)
    return nodes


def _zero_pixel(scale: tuple[float, ...], bias: tuple[float, ...]) -> int | None:
    """The uint8 pixel value every channel normalises to 0, if there is one."""
    values = {-b / s for s, b in zip(scale, bias, strict=True)}
    first = next(iter(values))
    rounded = round(first)
    if any(abs(v - rounded) > _PIXEL_TOLERANCE for v in values) or not 0 <= rounded <= 255:
        return None
    return int(rounded)


def _node(
    nodes: list[onnx.NodeProto],
    scope: NameScope,
    prefix: str,
    op_type: str,
    inputs: list[str],
    **attrs: Any,
) -> str:
    out = scope.fresh(f"{prefix}/{op_type.lower()}")
    nodes.append(
        onnx.helper.make_node(
            op_type, inputs, [out], name=scope.fresh(f"{prefix}/{op_type}"), **attrs
        )
    )
    return out


def _read_in_subgraph(graph: onnx.GraphProto, name: str) -> bool:
    for node in graph.node:
        for attr in node.attribute:
            subs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
            for sub in subs:
                if any(name in n.input for n in sub.node) or _read_in_subgraph(sub, name):
                    return True
    return False


def _drop_unused(graph: onnx.GraphProto, names: list[str]) -> None:
    """Remove initializers nothing reads any more (the conv's original weights)."""
    for name in names:
        if any(name in n.input for n in graph.node) or _read_in_subgraph(graph, name):
            continue
        if any(vi.name == name for vi in (*graph.output, *graph.input)):
            continue
        keep = [i for i in graph.initializer if i.name != name]
        del graph.initializer[:]
        graph.initializer.extend(keep)
