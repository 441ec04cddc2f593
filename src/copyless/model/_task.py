"""What a compiled model's outputs mean: its task record, the one owner of that knowledge.

The compiler writes the record into the compiled model's metadata (key ``"task"``, JSON);
apps and the server read it back with :func:`task_of`, never from the model's name::

    {"task": "detect", "head": "yolo", "classes": 80, "batch_added": false,
     "outputs": {"boxes": "boxes", "scores": "scores", "classes": "classes"},
     "labels": ["person", ...]}

* ``task``: ``"classify"`` (logits or probabilities ``[N, C]``), ``"detect"`` (boxes, scores
  and class ids), ``"segment"`` (a per-pixel class mask ``[N, H, W]`` or class scores
  ``[N, C, H, W]``), ``"text"`` (a one-channel text probability map ``[N, 1, H, W]``: the
  zoo's PP-OCR detector), or ``None`` when nothing was recognised.
* ``head``: how the model ends: ``"decoded"`` (torchvision's SSD / RetinaNet / Faster R-CNN
  exports: boxes, scores, labels already decoded), ``"yolo"``, ``"centerface"``,
  ``"picodet"`` (raw heads whose decoding and NMS the compiler folded in), ``"mask"`` (a
  segmenter whose argmax the compiler folded in), ``"scores"``, ``"logits"``, ``"map"``.
* ``outputs``: role -> output name (roles ``logits``, ``boxes``, ``scores``, ``classes``,
  ``landmarks``, ``batch_index``, ``mask``, ``class_scores``, ``text_map``).
* ``labels``: the class names (index = class id), empty when nobody named them.
* ``batch_added``: the model's input had no batch dimension (``[C, H, W]``, torchvision's
  detection export) and the compiler added one.

:func:`recognise` reads a list of outputs (name, dtype, shape) and says which task they fit;
:func:`check_task` refuses, in one line, a task the outputs contradict. Models compiled before
the record existed get it from their outputs and recorded options (:func:`record_of`). The
module imports no onnx: reading a record costs nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..types import DataType, OptionError, UnsupportedError
from ._compiled import CompiledModel
from ._preprocessing import InputPreprocessing, preprocessing_of

__all__ = [
    "EXPECTS",
    "KEY",
    "TASKS",
    "OutputDesc",
    "Recognised",
    "TaskRecord",
    "check_labels",
    "check_task",
    "parse_labels",
    "read_class_names",
    "recognise",
    "record_of",
    "task_of",
    "usual_preprocessing",
    "yolo_anchors",
]

KEY = "task"
#: The tasks a user names (``--task``); ``"text"`` is the zoo's text detector's own.
TASKS = ("classify", "detect", "segment")
#: What each task expects of the outputs: the refusals name it.
EXPECTS = {
    "classify": "logits or probabilities [N, C]",
    "detect": "decoded boxes [K, 4] + scores [K] + class ids [K] (torchvision's SSD, "
    "RetinaNet, Faster R-CNN exports) or a raw YOLO head [N, 4 + C, A] (ultralytics "
    "YOLOv8/YOLO11 exports)",
    "segment": "per-pixel class scores [N, C, H, W] (C >= 2, H x W > 1)",
}
#: YOLOv8/YOLO11's strides: a head of A anchors for an H x W input has
#: A = sum (H / s) (W / s) over them.
YOLO_STRIDES = (8, 16, 32)

#: channel counts of an image, not of class scores: an image-to-image model (RGB, RGBA out)
#: is recognised as no task; ``task="segment"`` takes such a model as a segmenter all the same
_IMAGE_CHANNELS = (3, 4)

_INTS = (DataType.INT64, DataType.INT32, DataType.UINT8, DataType.INT8, DataType.UINT32)
_FLOATS = (DataType.FLOAT32, DataType.FP16, DataType.BF16)


@dataclass(frozen=True, slots=True)
class OutputDesc:
    """One output as :func:`recognise` reads it: ``-1`` for a dim the data decides."""

    name: str
    data_type: DataType
    shape: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.name} {self.data_type.name} {list(self.shape)}"


@dataclass(frozen=True, slots=True)
class Recognised:
    """What :func:`recognise` found: the task, its head, role -> output and class count."""

    task: str | None
    head: str | None = None
    roles: tuple[tuple[str, str], ...] = ()
    classes: int | None = None


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A compiled model's task record (see the module docstring)."""

    task: str | None = None
    head: str | None = None
    roles: tuple[tuple[str, str], ...] = ()
    labels: tuple[str, ...] = ()
    classes: int | None = None
    batch_added: bool = False
    preprocessing: InputPreprocessing = field(default_factory=InputPreprocessing)

    def output(self, role: str) -> str | None:
        """The name of the output playing ``role``, None when none does."""
        return dict(self.roles).get(role)

    def to_json(self) -> dict[str, Any]:
        """The metadata's form (the preprocessing has its own key)."""
        return {"task": self.task, "head": self.head, "outputs": dict(self.roles),
                "labels": list(self.labels), "classes": self.classes,
                "batch_added": self.batch_added}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any], pre: InputPreprocessing) -> TaskRecord:
        """The record back; ``ValueError``/``TypeError`` on malformed data."""
        task = data.get("task")
        if task is not None and task not in (*TASKS, "text"):
            raise ValueError(f"unknown task {task!r}")
        outputs = data.get("outputs") or {}
        classes = data.get("classes")
        return cls(
            task=task,
            head=None if data.get("head") is None else str(data["head"]),
            roles=tuple((str(k), str(v)) for k, v in dict(outputs).items()),
            labels=tuple(str(x) for x in data.get("labels") or ()),
            classes=None if classes is None else int(classes),
            batch_added=bool(data.get("batch_added", False)),
            preprocessing=pre,
        )


#: head -> (colour order, resize policy) its users' reference pipelines use: torchvision's
#: classifiers (Resize + CenterCrop), detectors and segmenters fed at their input size,
#: ultralytics' letterbox of 114-grey
_USUAL = {
    "logits": ("RGB", "crop:0.875"),
    "decoded": ("RGB", "stretch"),
    "scores": ("RGB", "stretch"),
    "mask": ("RGB", "stretch"),
    "yolo": ("RGB", "letterbox:114"),
}


def usual_preprocessing(head: str | None) -> tuple[str, str] | None:
    """``(colour order, resize policy)`` a model with this head is usually fed with (the
    reference pipelines'), None for heads with no usual one."""
    return _USUAL.get(head or "")


def yolo_anchors(height: int, width: int) -> int:
    """The anchors of a YOLOv8/YOLO11 head for an ``height`` x ``width`` input."""
    return sum(-(-height // s) * -(-width // s) for s in YOLO_STRIDES)


def recognise(
    outputs: Sequence[OutputDesc], image: tuple[int, int] | None = None
) -> Recognised:
    """The task ``outputs`` fit (``image``: the model input's ``(H, W)``, which a YOLO
    head's anchor count must match); ``Recognised(None)`` when none does."""
    detected = _decoded(outputs)
    if detected is not None:
        return detected
    if len(outputs) == 1:
        return _single(outputs[0], image)
    # a segmenter with torchvision's auxiliary classifier: "out" and "aux", the same shape
    scores = [o for o in outputs if _class_scores(o) and o.shape[1] not in _IMAGE_CHANNELS]
    if scores and len({o.shape for o in scores}) == 1 and len(scores) == len(outputs):
        first = next((o for o in scores if o.name == "out"), scores[0])
        return Recognised("segment", "scores", (("class_scores", first.name),), first.shape[1])
    return Recognised(None)


def _single(out: OutputDesc, image: tuple[int, int] | None) -> Recognised:
    shape, name = out.shape, out.name
    if out.data_type not in _FLOATS:
        if out.data_type in _INTS and len(shape) == 3 and shape[1] > 1 and shape[2] > 1:
            return Recognised("segment", "mask", (("mask", name),))
        return Recognised(None)
    if (len(shape) == 2 and shape[1] >= 2) or (len(shape) == 4 and shape[1] >= 2
                                                and shape[2:] == (1, 1)):  # fmt: skip
        return Recognised("classify", "logits", (("logits", name),), shape[1])
    if len(shape) == 4 and shape[1] == 1 and shape[2] > 1 and shape[3] > 1:
        return Recognised("text", "map", (("text_map", name),))
    if _class_scores(out) and shape[1] not in _IMAGE_CHANNELS:
        return Recognised("segment", "scores", (("class_scores", name),), shape[1])
    if (len(shape) == 3 and shape[1] > 4 and image is not None and shape[2] > 0
            and shape[2] == yolo_anchors(*image)):  # fmt: skip
        return Recognised("detect", "yolo", (("head", name),), shape[1] - 4)
    return Recognised(None)


def _class_scores(out: OutputDesc) -> bool:
    shape = out.shape
    return (out.data_type in _FLOATS and len(shape) == 4 and shape[1] >= 2
            and shape[2] > 1 and shape[3] > 1)  # fmt: skip


_NAMED = {"boxes": "boxes", "scores": "scores", "classes": "classes", "labels": "classes",
          "landmarks": "landmarks", "batch_index": "batch_index"}  # fmt: skip


def _decoded(outputs: Sequence[OutputDesc]) -> Recognised | None:
    """Decoded detections: boxes ``[K, 4]``, scores ``[K]`` and class ids ``[K]`` (by name
    where the outputs are named so, else by dtype and shape), any other outputs extra."""
    roles: dict[str, str] = {}
    for out in outputs:
        role = _NAMED.get(out.name)
        if role is not None and _fits(role, out):
            roles.setdefault(role, out.name)
    taken = set(roles.values())
    for out in outputs:
        if out.name in taken:
            continue
        for role in ("boxes", "scores", "classes"):
            if role not in roles and _fits(role, out):
                roles[role] = out.name
                taken.add(out.name)
                break
    if not {"boxes", "scores", "classes"} <= set(roles):
        return None
    order = ("boxes", "scores", "classes", "landmarks", "batch_index")
    return Recognised("detect", "decoded", tuple((r, roles[r]) for r in order if r in roles))


def _fits(role: str, out: OutputDesc) -> bool:
    shape = out.shape
    if role == "boxes":
        return out.data_type in _FLOATS and len(shape) == 2 and shape[1] == 4
    if role == "scores":
        return out.data_type in _FLOATS and len(shape) == 1
    if role == "landmarks":
        return out.data_type in _FLOATS and len(shape) == 2 and shape[1] % 2 == 0
    return out.data_type in _INTS and len(shape) == 1  # classes, batch_index


def check_task(wanted: str | None, found: Recognised,
               outputs: Sequence[OutputDesc]) -> Recognised:  # fmt: skip
    """What the outputs are for ``wanted``: ``found``, or a segmenter of 3 or 4 classes that
    recognition took for an image (:data:`_IMAGE_CHANNELS`); :class:`UnsupportedError` (one
    line naming the outputs and what the task expects) when they do not fit ``wanted``.
    Nothing is refused for ``wanted`` None (a model whose outputs fit no task compiles with
    none recorded)."""
    if wanted is None or found.task == wanted:
        return found
    scores = [o for o in outputs if _class_scores(o)]
    if wanted == "segment" and found.task is None and len(scores) == len(outputs) == 1:
        return Recognised("segment", "scores", (("class_scores", scores[0].name),),
                          scores[0].shape[1])  # fmt: skip
    have = "; ".join(o.describe() for o in outputs)
    what = "fit no task" if found.task is None else f"are a {found.task} model's"
    raise UnsupportedError(f"task={wanted!r}: the outputs ({have}) {what}; {wanted} expects "
                           f"{EXPECTS[wanted]}")  # fmt: skip


def parse_labels(value: Any) -> tuple[str, ...] | None:
    """The ``labels`` option: a names file (one per line), or a sequence of names."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return tuple(read_class_names(value))
    if isinstance(value, Sequence) and all(isinstance(v, str) and v.strip() for v in value):
        if not value:
            raise OptionError("labels: an empty list of class names")
        return tuple(v.strip() for v in value)
    raise OptionError(f"labels must be a names file or a list of names, got {value!r}")


def read_class_names(path: str | os.PathLike[str]) -> list[str]:
    """The names in a text file, one per line (class id = line number from 0; surrounding
    spaces and trailing empty lines dropped). Raises :class:`OptionError` for a file that
    cannot be read or holds no name, or an empty line among the names."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError(f"cannot read the class names in {os.fspath(path)}: {exc}") from None
    names = [line.strip() for line in text.rstrip().splitlines()]
    if not names or not all(names):
        where = "no name" if not names else f"an empty line {names.index('') + 1}"
        raise OptionError(f"{os.fspath(path)} has {where}: give one class name per line")
    return names


def check_labels(labels: Sequence[str], classes: int | None, outputs: str) -> None:
    """:class:`OptionError` when ``labels`` do not name ``classes`` classes (None: the
    outputs do not say how many; torchvision's detectors, whose ids index COCO's 91)."""
    if classes is not None and len(labels) != classes:
        raise OptionError(f"labels: {len(labels)} names, but the outputs ({outputs}) have "
                          f"{classes} classes")  # fmt: skip


def record_of(model: CompiledModel) -> TaskRecord:
    """``model``'s task record: the one it carries, else what its outputs and recorded
    options tell (models compiled before the record existed)."""
    pre = preprocessing_of(model.metadata)
    text = model.metadata.get(KEY)
    if text:
        try:
            data = json.loads(text)
            if isinstance(data, dict):
                return TaskRecord.from_json(data, pre)
        except (ValueError, TypeError):
            pass
    return _legacy(model, pre)


def _legacy(model: CompiledModel, pre: InputPreprocessing) -> TaskRecord:
    outputs = [OutputDesc(s.name, s.cpu.data_type, tuple(-1 if i in s.dynamic_dims else d
               for i, d in enumerate(s.cpu.shape))) for s in model.outputs]  # fmt: skip
    found = recognise(outputs)
    labels: tuple[str, ...] = ()
    with contextlib.suppress(ValueError, TypeError):
        labels = tuple(str(x) for x in json.loads(model.metadata.get("labels") or "[]"))
    head = found.head
    try:
        post = json.loads(model.metadata.get("options") or "{}").get("postprocess")
    except (ValueError, TypeError, AttributeError):
        post = None
    if isinstance(post, dict) and found.task == "detect":
        head = str(post.get("kind"))
    return TaskRecord(found.task, head, found.roles, labels, found.classes, False, pre)


def task_of(model: str | os.PathLike[str] | CompiledModel) -> TaskRecord:
    """The task record of a compiled model (a path, or the loaded model)."""
    if not isinstance(model, CompiledModel):
        from ._loader import load_model

        model = load_model(Path(model))
    return record_of(model)
