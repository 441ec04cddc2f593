"""Folding view conversions into the graph: the HW view of an input becomes the graph input,
the HW view of an output the graph output.

For an input the graph starts with the dtype step (``Cast``, or ``DequantizeLinear`` for a
quantized integer view) and the layout step (``Transpose``/``Reshape`` back to the model's
NCHW, ``Slice`` of the channel padding), the layout step first when the HW elements are
narrower than the model's (bytes move faster than floats); then for frames of another size
the resize to the model's own H x W (:mod:`._resample`: PIL's bilinear on torchvision's crop
coordinates, as fixed taps every engine computes the same; ``input_crop`` is part of it),
and for pixel formats (see :mod:`._input_formats`) the normalisation ``(x - mean) / std`` as one
``Mul`` + ``Add``. For an output the graph ends with
the layout step (``Transpose``, ``Pad`` with zeros, ``Reshape``) then the dtype step (``Cast``
or ``QuantizeLinear``, which maps the zero padding to the zero point).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ..layout import GROUP
from ..types import DataType, MemoryLayout, NpuTensorInfo, QuantParameters, UnsupportedError
from ._graph import ELEM_OF, NameScope, NodeChain, default_opset, rename_reads
from ._resample import plane_taps, resample
from ._stem import find_stem_conv, fold_into_stem

#: Oldest default-domain opset whose Slice/Pad/QuantizeLinear forms the folding emits.
MIN_FOLD_OPSET = 11


@dataclass(frozen=True, slots=True)
class Fold:
    """How one boundary tensor's HW view relates to the model's own tensor.

    ``model_dtype`` is the dtype of the tensor inside the graph (the CPU view's dtype, except
    for RGBx inputs whose CPU view is float32 pixels). ``quant`` is folded as a
    Dequantize/QuantizeLinear; ``normalize`` is the per-channel ``(scale, bias)`` applied
    after the layout step (RGBx only). ``resize`` is the model's own ``(H, W)`` when the HW
    view holds frames of another size (``cpu`` then describes the frames).
    """

    cpu: NpuTensorInfo
    hw: NpuTensorInfo
    model_dtype: DataType
    quant: QuantParameters | None = None
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    resize: tuple[int, int] | None = None
    crop: tuple[int, int, int, int] | None = None  # (top, left, height, width) of the frame
    crop_fraction: float | None = None  # the input_crop option that gave ``crop``

    @property
    def identity(self) -> bool:
        return (
            self.resize is None
            and self.crop is None
            and self.hw.shape == self.cpu.shape
            and self.hw.memory_layout in (self.cpu.memory_layout, MemoryLayout.GENERIC)
            and self.hw.data_type is self.model_dtype
            and self.quant is None
            and self.normalize is None
            and not _nontrivial_order(self.hw)
        )


def _nontrivial_order(info: NpuTensorInfo) -> bool:
    order = info.memory_layout_order
    return bool(order) and list(order) != list(range(len(order)))


def check_opset(model: onnx.ModelProto, what: str) -> None:
    opset = default_opset(model)
    if opset < MIN_FOLD_OPSET:
        raise UnsupportedError(
            f"{what} needs a model of opset >= {MIN_FOLD_OPSET}; this one has opset {opset}"
        )


def fold_input(model: onnx.ModelProto, scope: NameScope, fold: Fold) -> None:
    """Make graph input ``fold.cpu.name`` take the HW view; the conversion becomes the
    first nodes of the graph."""
    graph, name = model.graph, fold.cpu.name
    if any(vi.name == name for vi in graph.output):
        raise UnsupportedError(f"input {name!r} is also a graph output; it cannot be folded")
    if _fold_into_stem(model, scope, fold):
        return
    internal = scope.fresh(f"{name}__cpu")
    rename_reads(graph.node, name, internal)
    chain = NodeChain(scope, name, f"copyless/in/{name}")
    hw, cpu = fold.hw, fold.cpu
    # Narrow elements (uint8 pixels, int8) are moved before they are widened: the layout
    # step then shuffles bytes, not floats (see .stem for the measurements).
    narrow = hw.data_type.itemsize < fold.model_dtype.itemsize
    resampled = fold.resize is not None  # the taps do the crop too (see .resample)
    if narrow:
        _to_logical(chain, hw, cpu)
        if not resampled:
            _crop(chain, fold)
    if fold.normalize is not None:
        chain.op("Cast", to=onnx.TensorProto.FLOAT)
    elif fold.quant is not None:
        _dequantize(chain, fold.quant, hw.data_type)
    elif hw.data_type is not fold.model_dtype:
        chain.op("Cast", to=ELEM_OF[fold.model_dtype])
    if not narrow:
        _to_logical(chain, hw, cpu)
        if not resampled:
            _crop(chain, fold)
    if fold.resize is not None:
        frame = (cpu.shape[2], cpu.shape[3])
        resample(chain, *plane_taps(frame, fold.resize, fold.crop_fraction))
        chain.op("Round")  # whole levels, as PIL's resized uint8 pixels
    if fold.normalize is not None:
        scale, bias = fold.normalize
        chain.op("Mul", chain.const(np.reshape(scale, (1, -1, 1, 1)), np.float32, "scale"))
        chain.op("Add", chain.const(np.reshape(bias, (1, -1, 1, 1)), np.float32, "bias"))
        if fold.model_dtype is not DataType.FLOAT32:
            chain.op("Cast", to=ELEM_OF[fold.model_dtype])
    chain.finish(internal)
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend([*chain.nodes, *nodes])
    graph.initializer.extend(chain.initializers)
    _retype(next(vi for vi in graph.input if vi.name == name), hw)


def _crop(chain: NodeChain, fold: Fold) -> None:
    """The centre region of the frame (``input_crop``), on NCHW."""
    if fold.crop is not None:
        top, left, height, width = fold.crop
        ends = _i64(chain, [top + height, left + width], "ends")
        chain.op("Slice", _i64(chain, [top, left], "starts"), ends, _i64(chain, [2, 3], "axes"))


def _fold_into_stem(model: onnx.ModelProto, scope: NameScope, fold: Fold) -> bool:
    """RGBx pixels feeding one convolution: fold normalisation and the x channel into it
    (see :mod:`copyless.model._stem`). False when the generic fold must be used."""
    hw = fold.hw
    if (
        fold.normalize is None
        or fold.resize is not None
        or fold.crop is not None
        or fold.quant is not None
        or fold.model_dtype is not DataType.FLOAT32
        or hw.memory_layout is not MemoryLayout.NHWC4
        or hw.data_type is not DataType.UINT8
        or _nontrivial_order(hw)
    ):
        return False
    scale, bias = fold.normalize
    stem = find_stem_conv(model.graph, fold.cpu.name, scale, bias)
    if stem is None:
        return False
    nodes = fold_into_stem(model.graph, scope, stem, scale, bias)
    existing = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend([*nodes, *existing])
    _retype(next(vi for vi in model.graph.input if vi.name == fold.cpu.name), hw)
    return True


def fold_output(model: onnx.ModelProto, scope: NameScope, fold: Fold) -> None:
    """Make graph output ``fold.cpu.name`` the HW view; the conversion ends the graph."""
    graph, name = model.graph, fold.cpu.name
    if any(vi.name == name for vi in graph.input):
        raise UnsupportedError(f"output {name!r} is also a graph input; it cannot be folded")
    internal = scope.fresh(f"{name}__cpu")
    for node in graph.node:
        for i, out in enumerate(node.output):
            if out == name:
                node.output[i] = internal
    for init in graph.initializer:
        if init.name == name:
            init.name = internal
    rename_reads(graph.node, name, internal)
    chain = NodeChain(scope, internal, f"copyless/out/{name}")
    hw, cpu = fold.hw, fold.cpu
    _from_logical(chain, cpu, hw)
    if fold.quant is not None:
        zp_dtype = hw.data_type.to_numpy()
        chain.op(
            "QuantizeLinear",
            chain.const(np.float32(fold.quant.scale), np.float32, "scale"),
            chain.const(fold.quant.zero_point, zp_dtype, "zero_point"),
        )
    elif hw.data_type is not fold.model_dtype:
        chain.op("Cast", to=ELEM_OF[hw.data_type])
    chain.finish(name)
    graph.node.extend(chain.nodes)
    graph.initializer.extend(chain.initializers)
    _retype(next(vi for vi in graph.output if vi.name == name), hw)


#: Default-domain opset whose Resize has ``antialias`` (a CPU resize's low-pass filter).
def _retype(vi: onnx.ValueInfoProto, info: NpuTensorInfo) -> None:
    tensor = vi.type.tensor_type
    tensor.elem_type = ELEM_OF[info.data_type]
    tensor.ClearField("shape")
    shape = tensor.shape
    for d in info.shape:
        shape.dim.add().dim_value = d


def _dequantize(chain: NodeChain, quant: QuantParameters, dtype: DataType) -> None:
    chain.op(
        "DequantizeLinear",
        chain.const(np.float32(quant.scale), np.float32, "scale"),
        chain.const(quant.zero_point, dtype.to_numpy(), "zero_point"),
    )


def _i64(chain: NodeChain, values: list[int] | tuple[int, ...], tag: str) -> str:
    return chain.const(np.asarray(values, dtype=np.int64), np.int64, tag)


def _to_logical(chain: NodeChain, hw: NpuTensorInfo, cpu: NpuTensorInfo) -> None:
    """HW physical layout -> the CPU layout (NCHW for images), in the model dtype."""
    layout = hw.memory_layout
    if layout is MemoryLayout.GENERIC:
        order = hw.memory_layout_order
        if _nontrivial_order(hw):
            inverse = [0] * len(order)
            for physical, logical in enumerate(order):
                inverse[logical] = physical
            chain.op("Transpose", perm=inverse)
        return
    if layout in (cpu.memory_layout, MemoryLayout.NC, MemoryLayout.NCH):
        return
    n, c, h, w = cpu.shape
    if layout is MemoryLayout.NHW:
        chain.op("Reshape", _i64(chain, [n, c, h, w], "shape"))
    elif layout in (MemoryLayout.NHWC, MemoryLayout.NHWC4, MemoryLayout.NHWC8):
        # Transpose first: the padding channels are then whole planes, and the Slice of
        # whole planes is a few copies where a Slice of NHWC's last axis is a strided
        # gather (onnxruntime: 10-20x slower).
        chain.op("Transpose", perm=[0, 3, 1, 2])
        if hw.shape[3] != c:
            chain.op("Slice", _i64(chain, [0], "starts"), _i64(chain, [c], "ends"),
                     _i64(chain, [1], "axes"))  # fmt: skip
    else:
        g = GROUP[layout]
        blocks = -(-c // g)
        blocked = layout in (MemoryLayout.NC4HW4, MemoryLayout.NC8HW8)
        chain.op("Transpose", perm=[0, 1, 4, 2, 3] if blocked else [3, 1, 4, 0, 2])
        chain.op("Reshape", _i64(chain, [n, blocks * g, h, w], "shape"))
        if blocks * g != c:
            chain.op("Slice", _i64(chain, [0], "starts"), _i64(chain, [c], "ends"),
                     _i64(chain, [1], "axes"))  # fmt: skip


def _from_logical(chain: NodeChain, cpu: NpuTensorInfo, hw: NpuTensorInfo) -> None:
    """The CPU layout -> HW physical layout, in the model dtype (padding is zero)."""
    layout = hw.memory_layout
    if layout is MemoryLayout.GENERIC:
        if _nontrivial_order(hw):
            chain.op("Transpose", perm=list(hw.memory_layout_order))
        return
    if layout in (cpu.memory_layout, MemoryLayout.NC, MemoryLayout.NCH):
        return
    n, c, h, w = cpu.shape
    if layout is MemoryLayout.NHW:
        chain.op("Reshape", _i64(chain, [n, h, w], "shape"))
        return
    if layout in (MemoryLayout.NHWC, MemoryLayout.NHWC4, MemoryLayout.NHWC8):
        chain.op("Transpose", perm=[0, 2, 3, 1])
        if hw.shape[3] != c:
            chain.op("Pad", _i64(chain, [0, 0, 0, 0, 0, 0, 0, hw.shape[3] - c], "pads"))
        return
    g = GROUP[layout]
    blocks = -(-c // g)
    if blocks * g != c:
        chain.op("Pad", _i64(chain, [0, 0, 0, 0, 0, blocks * g - c, 0, 0], "pads"))
    chain.op("Reshape", _i64(chain, [n, blocks, g, h, w], "shape"))
    blocked = layout in (MemoryLayout.NC4HW4, MemoryLayout.NC8HW8)
    chain.op("Transpose", perm=[0, 1, 3, 4, 2] if blocked else [3, 1, 4, 0, 2])
