"""The QDQ form onnxruntime's x86 INT8 kernels fuse, made from NNCF's quantized graph.

NNCF writes QDQ graphs OpenVINO runs on its INT8 kernels, but onnxruntime fuses a
``DequantizeLinear -> Conv -> QuantizeLinear`` group into one ``QLinearConv`` only when the
input and output activations have the same type and nothing sits between the convolution
and its ``QuantizeLinear``. NNCF's graph has signed activations beside unsigned ones and a
``Clip`` (ReLU6) after each convolution; onnxruntime then runs most convolutions in float
between the Q/DQ pairs: EfficientNet-Lite0 took 22 ms against fp32's 9 ms. This pass, exact
(every tensor keeps its value), gives it the form copyless's earlier hand-written quantizer
had (onnxruntime's U8S8), 4.6 ms:

* signed activation quantizers become unsigned with the zero point moved by 128: a uint8
  activation ``q + 128`` with zero point ``zp + 128`` is the same grid, value for value;
* a ``Relu`` or ``Clip`` whose only reader is a ``QuantizeLinear`` whose range lies inside
  the clip's is dropped: the quantizer's saturation clips alike (to its own range, inside
  the clip's), and the convolution before it meets its ``QuantizeLinear``;
* nodes and initializers left unread are removed; the IR version is capped for onnxruntime.

Weights stay int8 per output channel. (Activation quantizers must be per tensor: NNCF's
per-channel scales on the inputs of depthwise convolutions keep onnxruntime's kernels from
fusing; the quantizer asks NNCF for per-tensor ones.)
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from ._graph import IR_VERSION

__all__ = ["drop_unread", "onnxruntime_form"]

_QDQ = ("QuantizeLinear", "DequantizeLinear")


def onnxruntime_form(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the QDQ ``model`` in the form onnxruntime fuses (module docstring)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _unsigned_activations(out.graph)
    _fold_clips(out.graph)
    drop_unread(out.graph)
    out.ir_version = min(out.ir_version or IR_VERSION, IR_VERSION)
    return out


def _unsigned_activations(graph: onnx.GraphProto) -> None:
    inits = {t.name: t for t in graph.initializer}
    moved: set[str] = set()
    for node in graph.node:
        if node.op_type not in _QDQ or len(node.input) < 3 or node.input[0] in inits:
            continue  # a weight's DequantizeLinear reads an initializer: weights stay int8
        zero = inits.get(node.input[2])
        if zero is None or zero.name in moved:
            continue
        value = numpy_helper.to_array(zero)
        if value.dtype != np.int8:
            continue
        shifted = (value.astype(np.int16) + 128).astype(np.uint8)
        zero.CopyFrom(numpy_helper.from_array(shifted, zero.name))
        moved.add(zero.name)
    retyped = {n.output[0] for n in graph.node if n.op_type == "QuantizeLinear"
               and len(n.input) > 2 and n.input[2] in moved}  # fmt: skip
    kept = [vi for vi in graph.value_info if vi.name not in retyped]
    del graph.value_info[:]
    graph.value_info.extend(kept)


def _fold_clips(graph: onnx.GraphProto) -> None:
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {vi.name for vi in graph.output}
    dropped = []
    for node in graph.node:
        if node.op_type not in ("Relu", "Clip") or node.output[0] in outputs:
            continue
        after = readers.get(node.output[0], [])
        if len(after) != 1 or after[0].op_type != "QuantizeLinear" or len(after[0].input) < 3:
            continue
        bounds = _clip_bounds(node, consts)
        grid = _quantizer_range(after[0], consts)
        if bounds is None or grid is None:
            continue
        if grid[0] >= bounds[0] - _slack(bounds[0]) and grid[1] <= bounds[1] + _slack(bounds[1]):
            after[0].input[0] = node.input[0]
            dropped.append(node)
    for node in dropped:
        graph.node.remove(node)


def _slack(bound: float) -> float:
    """The float rounding a quantizer's range may carry past a clip bound (a scale of
    6 / 255 gives 255 * scale = 6.0000005)."""
    return 0.0 if math.isinf(bound) else 1e-6 * max(1.0, abs(bound))


def _clip_bounds(node: onnx.NodeProto, consts: dict[str, np.ndarray]) -> tuple[float, float] | None:
    """``(low, high)`` of a Relu or Clip (opset 11+ bounds as inputs; earlier, attributes);
    None where a bound is computed at run time."""
    if node.op_type == "Relu":
        return 0.0, math.inf
    low, high = -math.inf, math.inf
    for attr in node.attribute:  # opset < 11
        if attr.name == "min":
            low = float(attr.f)
        elif attr.name == "max":
            high = float(attr.f)
    for index, name in enumerate(node.input[1:3], start=1):
        if not name:
            continue
        value = consts.get(name)
        if value is None or value.size != 1:
            return None
        if index == 1:
            low = float(value.reshape(-1)[0])
        else:
            high = float(value.reshape(-1)[0])
    return low, high


def _quantizer_range(
    node: onnx.NodeProto, consts: dict[str, np.ndarray]
) -> tuple[float, float] | None:
    """The float range a per-tensor QuantizeLinear's output can represent; None when its
    parameters are not constants or are per channel."""
    scale, zero = consts.get(node.input[1]), consts.get(node.input[2])
    if scale is None or zero is None or scale.size != 1 or zero.dtype.kind not in "iu":
        return None
    limits = np.iinfo(zero.dtype)
    s, z = float(scale.reshape(-1)[0]), int(zero.reshape(-1)[0])
    return s * (limits.min - z), s * (limits.max - z)


def drop_unread(graph: onnx.GraphProto) -> None:
    """Remove nodes none of whose outputs is read (nor a graph output), repeatedly, then the
    initializers nothing reads (an initializer listed as a graph input stays)."""
    outputs = {vi.name for vi in graph.output}
    while True:
        read = _read_names(graph) | outputs
        dead = [n for n in graph.node if not any(out in read for out in n.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    read = _read_names(graph) | outputs | {vi.name for vi in graph.input}
    kept = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of ``graph`` reads, subgraphs' reads of outer names included."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                names |= _read_names(sub)
    return names
