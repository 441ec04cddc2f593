"""A segmenter's argmax folded into the graph: per-pixel class scores ``[N, C, H, W]`` become
the class mask ``mask [N, H, W]`` (uint8 for up to 256 classes, else int32).

The scores never leave the engine: the output is C x 4 bytes a pixel smaller (84x for
torchvision's 21 VOC classes), which is what an application reads, draws and sends. The
mask is the argmax torch computes (the first of equal scores).
"""

from __future__ import annotations

import onnx

from ...types import DataType
from .._graph import default_opset, tensor_value_info
from ._fold import free_names
from ._ops import Ops

__all__ = ["MASK", "fold_mask"]

MASK = "mask"


def fold_mask(model: onnx.ModelProto, scores: str, classes: int) -> tuple[str, ...]:
    """Replace the model's outputs by ``mask``, the argmax over dim 1 of output ``scores``
    (in place); returns the names of the nodes added (they stay float under INT8)."""
    free_names(model.graph, (MASK,))
    if scores == MASK:  # the scores output itself was renamed by free_names
        scores = next(vi.name for vi in model.graph.output if vi.name.startswith(MASK))
    ops = Ops(model.graph, "copyless/post/mask", default_opset(model))
    dtype = DataType.UINT8 if classes <= 256 else DataType.INT32
    best = ops.op("ArgMax", scores, axis=1, keepdims=0)
    cast = onnx.TensorProto.UINT8 if dtype is DataType.UINT8 else onnx.TensorProto.INT32
    ops.emit(ops.op("Cast", best, to=cast), MASK)
    nodes = tuple(node.name for node in ops.nodes)
    ops.commit()
    del model.graph.output[:]
    model.graph.output.append(tensor_value_info(MASK, dtype, ["batch", "height", "width"]))
    return nodes
