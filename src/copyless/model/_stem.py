"""Folding the RGBx input's normalisation into the first convolution.

The generic RGBx input fold (:func:`copyless.model._folding.fold_input`) starts the graph with
``Transpose -> Slice (drop x) -> Cast -> Mul -> Add``: five passes over the frame before the
model's first layer. When the input feeds exactly one ``Conv`` with constant weights (an
initializer or a ``Constant`` node), the per-channel affine ``x * scale + bias`` folds into
that convolution instead. Two forms, both exact up to float rounding (the tests compare
with the unfolded graph):

* **bias form**, when the convolution has no padding, or when every channel's mean is the
  same integer pixel value (EfficientNet-Lite0's 127): weights ``W'[o, c] = W[o, c] *
  scale[c]``, bias ``B'[o] = B[o] + sum_c,k W[o, c, k] * bias[c]``; the convolution's zero
  padding, zero in *normalised* units, becomes a ``Pad`` of the uint8 frame with the pixel
  value that normalises to zero (the mean). Prefix: ``[Pad] -> Transpose -> Slice -> Cast``.
* **mean form**, for any other mean (ImageNet's 123.675, 116.28, 103.53 with a padded stem:
  ResNet-50, PP-OCRv4): weights ``W * scale``, the bias and padding untouched, and the mean
  subtracted in float before the convolution, so its zero padding stays exact. Prefix:
  ``Transpose -> Slice -> Cast -> Sub``.

Why this order (measured on ONNX Runtime 1.2x and OpenVINO 2026.4, AVX-512 CPU, see
``copyless-bench prefix``): the ``Transpose`` moves bytes, not floats; the x channel is
dropped as a ``Slice`` of whole planes (a ``Slice`` of the last axis of NHWC costs more than
the convolution it feeds, 3.9 ms of PP-OCRv4 at 640x640 on onnxruntime); and the
convolution keeps its 3 input channels (a 4-channel stem with a zero x plane costs 25-50%
more in both engines' first-layer kernels). Nothing is copied at run time that the generic
fold did not copy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import numpy_helper

from ._graph import NameScope, NodeChain

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
    pad_value: int | None  # uint8 pixel value that normalises to 0 (bias form with padding)

    @property
    def mean_form(self) -> bool:
        """The mean is subtracted before the convolution (padded, no uniform pixel mean)."""
        return any(self.pads) and self.pad_value is None


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
    constants = _constants(graph)
    if node.input[1] not in constants or (len(node.input) > 2 and node.input[2] and
                                          node.input[2] not in constants):  # fmt: skip
        return None
    weights = constants[node.input[1]]
    if weights.dtype != np.float32 or weights.ndim != 4 or weights.shape[1] != 3:
        return None
    if len(node.input) > 2 and node.input[2]:
        conv_bias = constants[node.input[2]]
        if conv_bias.dtype != np.float32 or conv_bias.shape != (weights.shape[0],):
            return None
    else:
        conv_bias = np.zeros(weights.shape[0], np.float32)
    pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
    if len(pads) != 4 or min(pads) < 0:
        return None
    pad_value = _zero_pixel(scale, bias) if any(pads) else None
    return StemConv(node, weights, conv_bias, (pads[0], pads[1], pads[2], pads[3]), pad_value)


def fold_into_stem(
    graph: onnx.GraphProto,
    scope: NameScope,
    stem: StemConv,
    scale: tuple[float, ...],
    bias: tuple[float, ...],
) -> list[onnx.NodeProto]:
    """Rewrite the convolution for raw uint8 NHWC4 pixels; returns the nodes that must
    precede it (reading the graph input ``stem.node.input[0]``), the last writing the
    conv's input."""
    node, prefix = stem.node, f"copyless/stem/{stem.node.input[0]}"
    s = np.asarray(scale, np.float64)
    w = stem.weights.astype(np.float64)
    folded = (w * s[None, :, None, None]).astype(np.float32)
    if stem.mean_form:
        folded_bias = stem.bias
    else:
        b = np.asarray(bias, np.float64)
        folded_bias = (stem.bias + (w * b[None, :, None, None]).sum(axis=(1, 2, 3))).astype(
            np.float32
        )
    w_name, b_name = scope.fresh(f"{prefix}/weights"), scope.fresh(f"{prefix}/bias")
    old = [n for n in node.input[1:] if n]
    graph.initializer.extend(
        [numpy_helper.from_array(folded, w_name), numpy_helper.from_array(folded_bias, b_name)]
    )
    chain = NodeChain(scope, node.input[0], prefix)
    if stem.pad_value is not None:
        top, left, bottom, right = stem.pads
        pads = [0, top, left, 0, 0, bottom, right, 0]
        chain.op("Pad", chain.const(pads, np.int64, "pads"),
                 chain.const(stem.pad_value, np.uint8, "value"))  # fmt: skip
    chain.op("Transpose", perm=[0, 3, 1, 2])
    chain.op("Slice", chain.const([0], np.int64, "starts"), chain.const([3], np.int64, "ends"),
             chain.const([1], np.int64, "axes"))  # fmt: skip
    chain.op("Cast", to=onnx.TensorProto.FLOAT)
    if stem.mean_form:
        mean = -np.asarray(bias, np.float64) / s
        chain.op("Sub", chain.const(mean.reshape(1, 3, 1, 1), np.float32, "mean"))
    graph.initializer.extend(chain.initializers)
    node.input[:] = [chain.current, w_name, b_name]
    if stem.pad_value is not None:
        for attr in node.attribute:
            if attr.name == "pads":
                attr.ints[:] = [0, 0, 0, 0]
    _drop_unused(graph, old)
    form = "mean" if stem.mean_form else f"bias (pad value {stem.pad_value})"
    _log.debug("normalisation folded into %s, %s form", node.name, form)
    return chain.nodes


def _constants(graph: onnx.GraphProto) -> dict[str, npt.NDArray[Any]]:
    """Initializers and ``Constant`` node values by name (exported models use both)."""
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute):
            attr = node.attribute[0]
            if attr.name == "value" and attr.HasField("t"):
                values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _zero_pixel(scale: tuple[float, ...], bias: tuple[float, ...]) -> int | None:
    """The uint8 pixel value every channel normalises to 0, if there is one."""
    values = {-b / s for s, b in zip(scale, bias, strict=True)}
    first = next(iter(values))
    rounded = round(first)
    if any(abs(v - rounded) > _PIXEL_TOLERANCE for v in values) or not 0 <= rounded <= 255:
        return None
    return int(rounded)


def _read_in_subgraph(graph: onnx.GraphProto, name: str) -> bool:
    for node in graph.node:
        for attr in node.attribute:
            subs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
            for sub in subs:
                if any(name in n.input for n in sub.node) or _read_in_subgraph(sub, name):
                    return True
    return False


def _drop_unused(graph: onnx.GraphProto, names: list[str]) -> None:
    """Remove initializers and Constant nodes nothing reads any more (the old weights)."""
    for name in names:
        if any(name in n.input for n in graph.node) or _read_in_subgraph(graph, name):
            continue
        if any(vi.name == name for vi in (*graph.output, *graph.input)):
            continue
        keep = [i for i in graph.initializer if i.name != name]
        del graph.initializer[:]
        graph.initializer.extend(keep)
        nodes = [n for n in graph.node if not (n.op_type == "Constant" and name in n.output)]
        del graph.node[:]
        graph.node.extend(nodes)
