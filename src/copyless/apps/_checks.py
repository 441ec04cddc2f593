"""Checks the apps make before any work starts, so that a mistake costs one line and exit
status 2 instead of a traceback or a finished run thrown away:

- :func:`check_output`: the ``-o`` file's directory exists and takes a new file, its
  extension names a format the app writes (a ``.jpg`` gets JPEG bytes, never PNG);
- :func:`check_model_path`: a model path exists, and an ``.onnx`` given where a compiled
  model is wanted says how to compile it;
- :func:`model_task`: what a compiled model does, read from its task record, so an app
  refuses a model made for another task.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..model import CompiledModel, record_of

__all__ = [
    "UsageError",
    "check_model_path",
    "check_output",
    "check_output_directory",
    "model_task",
    "task_mismatch",
]

#: Postprocess kinds recorded by ``copyless-compile --postprocess`` -> copyless-detect task.
_DETECTOR_TASKS = {"centerface": "face", "picodet": "layout"}


class UsageError(ValueError):
    """A mistake in what the user asked for (the apps print it and exit with status 2)."""


def check_output(
    path: str | os.PathLike[str], suffixes: Iterable[str], what: str, *, parents: bool = False
) -> Path:
    """``path`` when a file of one of ``suffixes`` (lower case, with the dot) can be written
    there: its directory exists, is a directory and takes a new file (probed by creating
    and removing one, which also catches read-only mounts and /proc), and ``path`` is not a
    directory. Else :class:`UsageError` naming the path. Creates nothing that stays.

    ``parents=True``: for a writer that creates missing directories itself (``compile_model``),
    a missing directory is fine where the nearest one that exists takes new entries."""
    out = Path(path)
    known = tuple(suffixes)
    if out.suffix.lower() not in known:
        raise UsageError(f"{out}: unknown {what} extension {out.suffix or '(none)'!r} "
                         f"(use {', '.join(known)})")  # fmt: skip
    if out.is_dir():
        raise UsageError(f"{out} is a directory, not a {what} file")
    _check_directory(out.parent, parents)
    return out


def check_output_directory(path: str | os.PathLike[str], *, parents: bool = False) -> Path:
    """``path`` when a directory can be created or written there (an existing file, or a
    parent that is missing, a file or read-only, gives :class:`UsageError`; ``parents`` as
    in :func:`check_output`)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory")
    _check_directory(out if out.is_dir() else out.parent, parents)
    return out


def _check_directory(folder: Path, parents: bool) -> None:
    where = folder if str(folder) else Path(".")
    if parents:
        where = _nearest_existing(where)
    if not where.exists():
        raise UsageError(f"no directory {where} to write into")
    if not where.is_dir():
        raise UsageError(f"{where} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=where, prefix=".copyless-probe.")
    except OSError as exc:
        raise UsageError(f"cannot write into {where}: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)


def _nearest_existing(folder: Path) -> Path:
    """``folder`` or the nearest of its ancestors that exists (a file among them is returned
    too, so that the check names it): the one a writer's ``mkdir(parents=True)`` starts in."""
    for where in (folder, *folder.parents):
        if os.path.lexists(where):
            return where
    return Path(".")


def check_model_path(path: str | os.PathLike[str]) -> Path:
    """``path`` when it exists and is not an ONNX file; else :class:`UsageError` (an ONNX
    file gets the ``copyless-compile`` line that makes a compiled model of it)."""
    model = Path(path)
    if not model.exists():
        raise UsageError(f"no model at {model}")
    if model.is_file() and model.suffix.lower() == ".onnx":
        raise UsageError(f"{model} is an ONNX model, not a compiled one: compile it first "
                         f"(copyless-compile {model} -o {model.with_suffix('.rai')})")  # fmt: skip
    return model


def model_task(model: CompiledModel) -> str:
    """What ``model`` does, read from its task record (:func:`copyless.model.task_of`):
    ``"face"`` / ``"layout"`` (the zoo's detectors, by their folded postprocess),
    ``"detect"`` (any other detector: boxes, scores, class ids), ``"segment"``, ``"text"``
    (one ``[N, 1, H, W]`` probability map), ``"classifier"``, else ``"unknown"``."""
    record = record_of(model)
    if record.task == "detect":
        return _DETECTOR_TASKS.get(record.head or "", "detect")
    return {"classify": "classifier", "segment": "segment", "text": "text"}.get(
        record.task or "", "unknown")


def task_mismatch(path: str | os.PathLike[str], task: str, wanted: Iterable[str]) -> str | None:
    """The one-line refusal when a model of ``task`` is given for one of ``wanted``."""
    accepted = tuple(wanted)
    if task in accepted:
        return None
    what = {"classifier": "a classifier", "segment": "a segmenter", "detect": "a detector",
            "unknown": "not a model copyless recognises for this app (compile it with --task "
            "classify|detect|segment)"}.get(task, f"a {task} detector")  # fmt: skip
    return f"{path} is {what}; this app runs {' / '.join(accepted)} models"
