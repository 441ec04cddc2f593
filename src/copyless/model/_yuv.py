"""YUV 4:2:0 inputs (``input_format="i420" | "nv12"``): the decoder's planes are the graph
inputs and the graph does the colour conversion, so the CPU never converts colours.

The model's image input ``x`` (float ``[N, 3, h, w]``) is replaced by one uint8 graph input
per plane, named ``x_y``, ``x_u``, ``x_v`` (I420) or ``x_y``, ``x_uv`` (NV12):

* Y ``[N, H, W]``; U and V ``[N, ceil(H/2), ceil(W/2)]``; interleaved UV
  ``[N, ceil(H/2), ceil(W/2), 2]``. Each plane's CPU view equals its HW view (no conversion
  in the runner either).
* ``input_line_sizes=(luma, chroma)``: the planes as the decoder lays them out, lines padded
  to those byte counts (FFmpeg aligns line sizes: a 72-pixel-wide frame has 128-byte luma
  lines); the widths become the line sizes (NV12: half the chroma line, two bytes each) and
  the graph's first ``Slice`` drops the padding, so such planes bind without a copy too.

The graph starts with, per plane, ``Cast`` and the resize to the model's ``h x w``
(:mod:`._resample`: PIL's bilinear filter on torchvision's resize + centre-crop coordinates,
as fixed taps that every engine computes the same; chroma upsampled nearest, as FFmpeg's
swscale does, by the same taps); then ``Concat`` to YUV, a 1x1 ``Conv`` holding the colour
matrix (``yuv_matrix`` BT.601 or BT.709, ``yuv_range`` limited 16..235 or full 0..255;
the offset as FFmpeg's swscale computes it, :data:`SWSCALE_BIAS`),
``Clip`` to 0..255, ``Round`` to whole levels (the reference's pixels are uint8: on
EfficientNet-Lite0 rounding alone moved 2 of 48 narrow-margin frames to the reference's
answer) and the normalisation ``(x - mean) / std`` as ``Mul`` + ``Add``.
Converting after resizing is exact up to the clipping of out-of-gamut pixels (the
conversion is affine) and costs ``h x w`` instead of ``H x W`` per pixel. A frame of the
model's own size is only sliced (line padding) and converted.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from ..types import (
    DataType,
    NpuTensorInfo,
    OptionError,
    TensorDirection,
    TensorType,
    UnsupportedError,
)
from ._folding import Fold
from ._graph import ELEM_OF, NameScope, NodeChain, cpu_layout_for, tensor_value_info
from ._input_formats import YUV_MATRICES, input_format
from ._options import CompileOptions
from ._pixels import normalization, pixel_geometry
from ._resample import plane_taps, resample


def is_yuv(opts: CompileOptions) -> bool:
    fmt = input_format(opts.input_format)
    return fmt is not None and fmt.yuv


def plane_infos(cpu: NpuTensorInfo, opts: CompileOptions) -> tuple[NpuTensorInfo, ...]:
    """The HW views of the planes that replace image input ``cpu`` (uint8, in plane order)."""
    fmt = input_format(opts.input_format)
    if fmt is None or not fmt.yuv:
        raise ValueError(f"input_format {opts.input_format!r} has no planes")
    pixels, _ = pixel_geometry(cpu, opts, align=2)
    n, _, height, width = pixels.shape
    rows, cols = (height + 1) // 2, (width + 1) // 2
    nv12 = fmt.name == "nv12"
    luma, chroma = opts.input_line_sizes or (width, 2 * cols if nv12 else cols)
    if luma < width or chroma < (2 * cols if nv12 else cols) or (nv12 and chroma % 2):
        raise OptionError(
            f"input_line_sizes {(luma, chroma)} cannot hold {fmt.name} lines of a {width}-wide "
            f"frame (luma >= {width}, chroma >= {2 * cols if nv12 else cols}"
            f"{', even' if nv12 else ''})"
        )
    shapes = {"y": (n, height, luma), "u": (n, rows, chroma), "v": (n, rows, chroma),
              "uv": (n, rows, chroma // 2, 2)}  # fmt: skip
    return tuple(
        NpuTensorInfo(
            f"{cpu.name}_{plane}",
            DataType.UINT8,
            TensorDirection.INPUT,
            TensorType.HW,
            cpu_layout_for(len(shapes[plane])),
            shapes[plane],
        )
        for plane in fmt.planes
    )


def plane_folds(cpu: NpuTensorInfo, opts: CompileOptions) -> list[Fold]:
    """One identity fold per plane (the CPU view is the HW view)."""
    if opts.input_layout or opts.input_dtype:
        raise OptionError(
            f"input_format={opts.input_format!r} fixes the input views; drop input_layout/dtype"
        )
    return [
        Fold(dataclasses.replace(hw, tensor_type=TensorType.CPU), hw, DataType.UINT8)
        for hw in plane_infos(cpu, opts)
    ]


#: What FFmpeg's swscale gives below the exact conversion, per R, G, B (its fixed point
#: truncates): measured on random 640x480 yuv420p frames through PyAV's ``rgb24``, the mean
#: of exact - swscale, the same for BT.601 and BT.709. Matching it is what makes the graph's
#: pixels the reference's: the exact matrix alone left the video path at 81-87% top-1 on
#: scenes where OpenCV on swscale's frames had 100%.
SWSCALE_BIAS = {"limited": (0.990, 1.485, 0.990), "full": (0.497, 0.990, 0.497)}


def colour_matrix(matrix: str, full_range: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(M, b)`` with ``rgb = M @ (y, u, v) + b`` in pixel units (before clipping): the
    ``matrix`` (BT.601/BT.709) exactly, the offset lowered by :data:`SWSCALE_BIAS`."""
    kr, kb = YUV_MATRICES[matrix]
    kg = 1.0 - kr - kb
    to_rgb = np.array(
        [
            [1.0, 0.0, 2.0 * (1.0 - kr)],
            [1.0, -2.0 * kb * (1.0 - kb) / kg, -2.0 * kr * (1.0 - kr) / kg],
            [1.0, 2.0 * (1.0 - kb), 0.0],
        ]
    )
    luma, chroma, offset = (1.0, 1.0, 0.0) if full_range else (255 / 219, 255 / 224, 16.0)
    m = to_rgb @ np.diag([luma, chroma, chroma])
    bias = np.array(SWSCALE_BIAS["full" if full_range else "limited"])
    return m, -m @ np.array([offset, 128.0, 128.0]) - bias


def fold_yuv_input(
    model: onnx.ModelProto, scope: NameScope, cpu: NpuTensorInfo, opts: CompileOptions
) -> None:
    """Replace graph input ``cpu.name`` by the planes of :func:`plane_infos`; the conversion
    (crop, resize, colour matrix, normalisation) becomes the first nodes of the graph."""
    graph = model.graph
    if any(vi.name == cpu.name for vi in graph.output):
        raise UnsupportedError(f"input {cpu.name!r} is also a graph output; it cannot be folded")
    planes = plane_infos(cpu, opts)
    names = [scope.fresh(p.name) for p in planes]
    if names != [p.name for p in planes]:
        raise UnsupportedError(f"the model already has a tensor named like a plane of {names}")
    prefix = f"copyless/in/{cpu.name}"
    pixels, (_, crop) = pixel_geometry(cpu, opts, align=2)
    target = (cpu.shape[0], 1, cpu.shape[2], cpu.shape[3])
    height, width = pixels.shape[2], pixels.shape[3]
    valid = ((height, width), ((height + 1) // 2, (width + 1) // 2))  # samples, not padding
    frame = ((height, width), None if crop is None else opts.input_crop)
    luma = _plane_chain(
        model, scope, f"{prefix}/y", (names[0], planes[0].shape, valid[0]), frame, target
    )
    v = None
    if len(planes) == 3:  # I420: stack U and V as two channels
        v = NodeChain(scope, names[2], f"{prefix}/v")
        v.op("Reshape", v.const(_channel_shape(planes[2].shape), np.int64, "shape"))
    chroma = _plane_chain(
        model, scope, f"{prefix}/uv", (names[1], planes[1].shape, valid[1]), frame, target, v
    )
    chain = NodeChain(scope, luma.current, prefix)
    chain.op("Concat", chroma.current, axis=1)
    m, b = colour_matrix(opts.yuv_matrix, opts.yuv_range == "full")
    chain.op("Conv", chain.const(m.reshape(3, 3, 1, 1), np.float32, "yuv_to_rgb"),
             chain.const(b, np.float32, "yuv_offset"))  # fmt: skip
    chain.op("Clip", chain.const(0.0, np.float32, "min"), chain.const(255.0, np.float32, "max"))
    chain.op("Round")  # whole levels, as the reference's uint8 pixels (see SWSCALE_BIAS)
    scale, bias = normalization(opts)
    chain.op("Mul", chain.const(np.reshape(scale, (1, -1, 1, 1)), np.float32, "scale"))
    chain.op("Add", chain.const(np.reshape(bias, (1, -1, 1, 1)), np.float32, "bias"))
    if cpu.data_type is not DataType.FLOAT32:
        chain.op("Cast", to=ELEM_OF[cpu.data_type])
    chain.finish(cpu.name)
    parts = [luma, chroma, *([v] if v is not None else []), chain]
    nodes = [node for part in parts for node in part.nodes]
    _prepend(graph, nodes, [i for part in parts for i in part.initializers])
    _replace_input(graph, cpu.name, names, planes)


def _plane_chain(
    model: onnx.ModelProto,
    scope: NameScope,
    prefix: str,
    plane: tuple[str, tuple[int, ...], tuple[int, int]],
    frame: tuple[tuple[int, int], float | None],
    target: tuple[int, int, int, int],
    second: NodeChain | None = None,
) -> NodeChain:
    """One plane (Y, interleaved UV, or U with ``second`` holding V) to float NCHW at the
    model's size: ``[N, C, h, w]``. ``plane`` is the graph input's name, its shape (lines
    may be padded: ``input_line_sizes``) and the ``(rows, columns)`` of samples in it."""
    name, shape, valid = plane
    chain = NodeChain(scope, name, prefix)
    interleaved = len(shape) == 4
    if interleaved:
        chain.op("Transpose", perm=[0, 3, 1, 2])
    else:
        chain.op("Reshape", chain.const(_channel_shape(shape), np.int64, "shape"))
    if second is not None:
        chain.op("Concat", second.current, axis=1)
    channels = 2 if interleaved or second is not None else 1
    size, crop = frame
    if channels == 1 and crop is None and size == target[2:]:  # at most drop line padding
        if tuple(shape[1:3]) != valid:
            chain.op("Slice", chain.const([0, 0], np.int64, "starts"),
                     chain.const(list(valid), np.int64, "ends"),
                     chain.const([2, 3], np.int64, "axes"))  # fmt: skip
        chain.op("Cast", to=onnx.TensorProto.FLOAT)
        return chain
    rows, cols = plane_taps(size, (target[2], target[3]), crop, 1 if channels == 1 else 2)
    resample(chain, rows, cols, cast=True)  # slices off the padding, then casts
    return chain


def _channel_shape(shape: tuple[int, ...]) -> list[int]:
    return [shape[0], 1, shape[1], shape[2]]


def _prepend(
    graph: onnx.GraphProto, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]
) -> None:
    existing = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes, *existing])
    graph.initializer.extend(inits)


def _replace_input(
    graph: onnx.GraphProto, name: str, names: list[str], planes: tuple[NpuTensorInfo, ...]
) -> None:
    """Put the plane inputs where graph input ``name`` was, in plane order."""
    inputs = list(graph.input)
    at = next(i for i, vi in enumerate(inputs) if vi.name == name)
    new = [tensor_value_info(n, p.data_type, p.shape) for n, p in zip(names, planes, strict=True)]
    del graph.input[:]
    graph.input.extend([*inputs[:at], *new, *inputs[at + 1 :]])
