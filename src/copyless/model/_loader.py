"""``load_model``: open a compiled model in either form and validate it.

Accepted paths: a ``.rai`` file (memory-mapped), a directory holding a ``vaiml_par_0`` (or
``par_0``) partition directory, such a partition directory itself, or a directory holding
exactly one ``.rai`` file. Whatever the bytes, the only exception
type that leaves the loader is :class:`ModelLoadError`.

A directory is read as a sealed box: nothing outside the directory named is read (no
symlink leaving it, no external data file a graph points to), nothing but regular files
(no FIFO, no device), and sizes are checked before reading (see :mod:`._files`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from ..types import ModelLoadError, OptionError
from ._archive import read_archive
from ._compiled import CompiledModel
from ._directory import MANIFEST, PARTITION_DIRS, find_manifest_dir, read_directory
from ._files import check_inside

_log = logging.getLogger(__name__)


def load_model(
    path: str | os.PathLike[str], cache_path: str | os.PathLike[str] | None = None
) -> CompiledModel:
    """Load and validate a compiled model.

    ``cache_path`` (VART-ML's extraction folder for a ``.rai``: copyless maps the archive and
    extracts nothing) is recorded on the model: runners created from it keep their engine
    caches there unless their own ``cache_path`` option says otherwise (see
    ``copyless.backends._cache``). Each partition graph is copied once (out of the map, or
    read from its file) into ``Partition.onnx_bytes``. Raises OptionError for a
    ``cache_path`` that is not a path.
    """
    if cache_path is not None and not isinstance(cache_path, (str, os.PathLike)):
        raise OptionError(f"cache_path must be a path or None, got {cache_path!r}")
    model = _load_checked(Path(path))
    if cache_path is None:
        return model
    return dataclasses.replace(model, cache_path=os.fspath(cache_path))


def _load_checked(target: Path) -> CompiledModel:
    try:
        return _load(target)
    except ModelLoadError:
        raise
    except RecursionError as exc:
        raise ModelLoadError(f"{target}: manifest nests too deeply") from exc
    except Exception as exc:  # the loader's contract: only ModelLoadError leaves
        raise ModelLoadError(f"{target}: unreadable model: {type(exc).__name__}: {exc}") from exc


def _load(target: Path) -> CompiledModel:
    if target.is_dir():
        folder = find_manifest_dir(target)
        if folder is not None:
            model = read_directory(folder, boundary=target)
        else:
            archives = sorted(p for p in target.iterdir() if p.suffix == ".rai")
            if len(archives) != 1:
                _check_older_layout(target)
                found = "no .rai file" if not archives else f"{len(archives)} .rai files"
                raise ModelLoadError(
                    f"{target}: not a compiled model: no {' or '.join(PARTITION_DIRS)} "
                    f"directory and {found} (expected a compiled model directory, a "
                    "partition directory, or exactly one .rai)"
                )
            model = read_archive(check_inside(archives[0], target, str(target), archives[0].name))
    elif target.is_file():
        model = read_archive(target)
    elif target.exists():
        raise ModelLoadError(f"{target}: not a regular file or a directory (a device or pipe?)")
    else:
        raise ModelLoadError(f"{target}: no such file or directory")
    _log.debug("loaded %s: %d partition(s)", target, len(model.partitions))
    return model


def _check_older_layout(target: Path) -> None:
    """A partition directory without its manifest: say why, not only what is missing."""
    for name in PARTITION_DIRS:
        if (target / name).is_dir():
            raise ModelLoadError(
                f"{target}: {name} has no {MANIFEST}: written by copyless < 0.2, whose "
                "manifest sits beside it (copy the whole compiled directory)"
            )
