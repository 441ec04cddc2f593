"""The compiler's side of the task record (see :mod:`._task`): it adds a batch dimension to
a model that has none, recognises what the model's outputs are before anything is folded,
chooses the folds the task calls for (a YOLO head's decoding and NMS, a segmenter's argmax)
and writes the record.

Order inside :func:`copyless.model.compile_model`: :func:`add_batch_dim` before the inputs
are fixed; :func:`plan_task` once they are; the folds; :func:`task_metadata` last, from the
outputs as compiled.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..types import NpuTensorInfo, OptionError, UnsupportedError
from ._graph import NameScope, default_opset, graph_inputs
from ._preprocessing import ResizePolicy
from ._shapes import ORT_ERRORS, probe, session
from ._task import (
    OutputDesc,
    Recognised,
    TaskRecord,
    check_labels,
    check_task,
    recognise,
    usual_preprocessing,
)
from .postprocess import KINDS, Folded, PostprocessOptions, fold_mask, parse_postprocess

__all__ = [
    "TaskPlan",
    "add_batch_dim",
    "decoded_capacity",
    "fold_task_mask",
    "plan_task",
    "task_defaults",
    "task_metadata",
]

_log = logging.getLogger(__name__)

#: postprocess kind -> the task its outputs are
_KIND_TASK = {kind: "detect" for kind in KINDS}


@dataclass(frozen=True, slots=True)
class TaskPlan:
    """What the compiler does for the task: the outputs it found, the postprocess it folds
    (the user's, or the recognised YOLO head's), the scores output whose argmax it folds."""

    wanted: str | None
    found: Recognised
    postprocess: PostprocessOptions | None
    mask_of: str | None
    labels: tuple[str, ...] | None


#: The smallest side of an input taken for an image ``[3, H, W]`` without a batch dimension:
#: smaller ones are tensors of another kind (ONNX's own test cases take ``[3, 4, 5]``).
MIN_IMAGE_SIDE = 32


def add_batch_dim(model: onnx.ModelProto, batch_size: int, given: bool) -> bool:
    """Give a single ``[3, H, W]`` float input (torchvision's detection export; H and W
    symbolic or at least :data:`MIN_IMAGE_SIDE`) a batch dimension, in place: the new
    input ``[1, 3, H, W]`` feeds a Squeeze into the graph.
    Returns whether it did; ``given``: the user fixed the input's shape (nothing is added)."""
    inputs = graph_inputs(model.graph)
    if given or len(inputs) != 1:
        return False
    vi = inputs[0]
    tensor = vi.type.tensor_type
    dims = list(tensor.shape.dim) if tensor.HasField("shape") else []
    if len(dims) != 3 or not dims[0].HasField("dim_value") or dims[0].dim_value != 3 \
            or tensor.elem_type != onnx.TensorProto.FLOAT \
            or any(d.HasField("dim_value") and d.dim_value < MIN_IMAGE_SIDE for d in dims[1:]):
        return False  # fmt: skip
    if batch_size != 1:
        raise UnsupportedError(
            f"input {vi.name!r} {_dims(dims)} has no batch dimension: the model takes one image "
            f"a call, so it compiles for batch 1 only (batch_size={batch_size})"
        )
    scope = NameScope(model.graph)
    inner = scope.fresh(f"{vi.name}__image")
    for node in model.graph.node:
        node.input[:] = [inner if name == vi.name else name for name in node.input]
    if default_opset(model) >= 13:
        axes = scope.fresh("copyless/batch/axes")
        model.graph.initializer.append(helper.make_tensor(axes, onnx.TensorProto.INT64, [1], [0]))
        squeeze = helper.make_node("Squeeze", [vi.name, axes], [inner],
                                   name=scope.fresh("copyless/batch/Squeeze"))  # fmt: skip
    else:
        squeeze = helper.make_node("Squeeze", [vi.name], [inner], axes=[0],
                                   name=scope.fresh("copyless/batch/Squeeze"))  # fmt: skip
    model.graph.node.insert(0, squeeze)
    old = [onnx.TensorShapeProto.Dimension() for _ in dims]
    for copy, dim in zip(old, dims, strict=True):
        copy.CopyFrom(dim)
    del tensor.shape.dim[:]
    tensor.shape.dim.add().dim_value = 1
    for dim in old:
        tensor.shape.dim.add().CopyFrom(dim)
    _log.info("input %r %s has no batch dimension: added one (%s)", vi.name, _dims(old),
              _dims(list(tensor.shape.dim)))  # fmt: skip
    return True


def _dims(dims: list[onnx.TensorShapeProto.Dimension]) -> str:
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?"
                           for d in dims) + "]"  # fmt: skip


#: What one run on zeros may raise: onnxruntime's errors, a dtype numpy has no zeros of.
_RUN_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, *ORT_ERRORS)


def _described(model: onnx.ModelProto, inputs: tuple[NpuTensorInfo, ...]) -> list[OutputDesc]:
    """The outputs as onnxruntime types them; where it cannot say a dim (a Resize to a
    computed size), as one run on zeros gives them."""
    probed = probe(model)
    names = [vi.name for vi in model.graph.output]
    if all(probed[n].static for n in names):
        return [OutputDesc(n, probed[n].dtype, probed[n].shape) for n in names]
    work = onnx.ModelProto()
    work.CopyFrom(model)
    for vi in work.graph.output:
        vi.type.tensor_type.ClearField("shape")
    try:
        feed = {i.name: np.zeros(i.shape, i.data_type.to_numpy()) for i in inputs}
        ran = session(work.SerializeToString(), optimize=False).run(names, feed)
    except _RUN_ERRORS:
        return [OutputDesc(n, probed[n].dtype, probed[n].shape) for n in names]
    # a dim the data decides takes this run's value: recognising needs the rank and the
    # fixed dims only (the record is written from the outputs as compiled)
    return [OutputDesc(n, probed[n].dtype, tuple(int(d) for d in np.shape(value)))
            for n, value in zip(names, ran, strict=True)]  # fmt: skip


def _image(infos: tuple[NpuTensorInfo, ...]) -> tuple[int, int] | None:
    if len(infos) == 1 and len(infos[0].shape) == 4:
        return (infos[0].shape[2], infos[0].shape[3])
    return None


def plan_task(
    model: onnx.ModelProto,
    wanted: str | None,
    postprocess: PostprocessOptions | None,
    thresholds: tuple[object, object, object] | None,
    labels: tuple[str, ...] | None,
    inputs: tuple[NpuTensorInfo, ...],
) -> TaskPlan:
    """Recognise the model's outputs (before any fold), check them against ``wanted`` and
    the labels, and choose the folds. Raises :class:`UnsupportedError` (a task the outputs
    contradict) or :class:`OptionError` (labels of the wrong length) in one line."""
    if postprocess is not None:  # the user named the head: its decoding says what it is
        if wanted not in (None, _KIND_TASK[postprocess.kind]):
            raise OptionError(f"task={wanted!r} contradicts postprocess={postprocess.kind!r} "
                              "(a detector's decoding)")  # fmt: skip
        return TaskPlan("detect", Recognised("detect", postprocess.kind), postprocess, None,
                        labels)  # fmt: skip
    outputs = _described(model, inputs)
    found = recognise(outputs, _image(inputs))
    found = check_task(wanted, found, outputs)
    if thresholds is not None and found.head != "yolo":
        raise OptionError("score_threshold/iou_threshold/max_detections apply to a detector "
                          "whose decoding the compiler folds in (a YOLO head, or "
                          "postprocess=...); this model's outputs are "
                          + "; ".join(o.describe() for o in outputs))  # fmt: skip
    if labels is not None:
        check_labels(labels, found.classes, "; ".join(o.describe() for o in outputs))
    if found.head == "yolo":
        post = parse_postprocess("yolo", *(thresholds or (None, None, None)))
        _log.info("recognised a YOLO head %s: folding its decoding and NMS", outputs[0].shape)
        return TaskPlan(found.task, found, post, None, labels)
    # the argmax only when asked: a feature map [N, C, H, W] is recognised as class scores
    # too, and must keep its values
    mask_of = dict(found.roles).get("class_scores") if wanted == "segment" else None
    return TaskPlan(found.task, found, None, mask_of, labels)


def task_defaults(
    plan: TaskPlan, colour: str | None, resize: ResizePolicy | None
) -> tuple[str | None, ResizePolicy | None]:
    """The colour order and resize policy to record for a model given its normalisation
    (mean/std) but not these: what its task's reference pipeline uses
    (:func:`usual_preprocessing`); what the user gave always wins."""
    usual = usual_preprocessing(plan.found.head)
    if usual is None:
        return colour, resize
    return colour or usual[0], resize or ResizePolicy.parse(usual[1])


#: The rows a decoded detector's outputs hold when the user names no capacity: torchvision
#: keeps at most 300 detections (SSD, RetinaNet) or 100 (Faster R-CNN) an image.
DECODED_CAPACITY = 1000


def decoded_capacity(
    plan: TaskPlan, given: tuple[tuple[str, tuple[int, ...]], ...]
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``given`` (the ``output_capacity`` option) plus, for an already-decoded detector,
    :data:`DECODED_CAPACITY` rows for each detection output the user left out."""
    if plan.found.head != "decoded":
        return given
    named = {name for name, _ in given}
    trailing = {"boxes": (4,), "landmarks": (10,)}
    extra = tuple((name, (DECODED_CAPACITY, *trailing.get(role, ())))
                  for role, name in plan.found.roles
                  if name not in named and role != "landmarks")  # fmt: skip
    return (*given, *extra)


def fold_task_mask(model: onnx.ModelProto, plan: TaskPlan) -> tuple[str, ...]:
    """Fold the segmenter's argmax (see :mod:`copyless.model.postprocess._mask`); the
    nodes added, () when the plan has none."""
    if plan.mask_of is None or plan.found.classes is None:
        return ()
    return fold_mask(model, plan.mask_of, plan.found.classes)


def task_metadata(
    plan: TaskPlan,
    folded: Folded | None,
    outputs: tuple[NpuTensorInfo, ...],
    batch_added: bool,
    dynamic: dict[str, tuple[int, ...]],
) -> str:
    """The record (JSON) of the compiled model, read from its outputs as compiled."""
    described = [OutputDesc(o.name, o.data_type, tuple(-1 if i in dynamic.get(o.name, ()) else d
                 for i, d in enumerate(o.shape))) for o in outputs]  # fmt: skip
    found = recognise(described)
    head = plan.found.head
    if folded is not None:
        head = plan.postprocess.kind if plan.postprocess is not None else head
    elif plan.mask_of is not None:
        head = "mask"
    labels: tuple[str, ...] = plan.labels or (folded.labels if folded is not None else ())
    classes = plan.found.classes
    if folded is not None and plan.labels is not None:
        check_labels(plan.labels, len(folded.labels), ", ".join(o.describe() for o in outputs))
    if folded is not None:
        classes = len(folded.labels)
    if plan.labels is None and classes is not None and len(labels) not in (0, classes):
        labels = ()
    record = TaskRecord(found.task or plan.found.task, head, found.roles or plan.found.roles,
                        labels, classes, batch_added)  # fmt: skip
    return json.dumps(record.to_json(), sort_keys=True)

