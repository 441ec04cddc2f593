"""The directory form of a compiled model (VART-ML's ``vaiml_par_0`` layout)::

    OUT/vaiml_par_0/manifest.json    the manifest (see :mod:`._manifest`)
    OUT/vaiml_par_0/par_0.onnx       one ONNX graph per partition
    OUT/vaiml_par_0/par_1.onnx       ... (CPU partitions, when the model has them)

The partition directory is self-contained: every path in its manifest is relative to it, so
``vaiml_par_0`` copied alone (under any parent, or renamed ``par_0``) loads. The loader
also reads the layout of copyless before 0.2 (``OUT/manifest.json`` beside
``OUT/par_N/model.onnx``).

Each partition's manifest entry holds ``"blob": {"path", "size", "crc32"}`` so a damaged or
swapped graph file is caught at load. ``manifest.json`` is written last and atomically, so
a directory with a manifest is complete.

Reading stays inside the directory the user named (see :mod:`._files`): no symlink out of
it, no FIFO or device, sizes checked before reading; a graph that points to external data
files is refused by the manifest's checks (:mod:`._manifest`).
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

from ..types import ModelLoadError, write_atomically
from ._compiled import CompiledModel
from ._files import check_inside, read_inside
from ._manifest import manifest_of, model_from_manifest

MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20
"""Largest manifest read: metadata of a few hundred tensors is kilobytes."""
#: The partition directory copyless writes (the seeds' name), then the names it also reads.
PARTITION_DIR = "vaiml_par_0"
PARTITION_DIRS = (PARTITION_DIR, "par_0")


def write_directory(model: CompiledModel, root: Path) -> Path:
    """Write ``model`` as ``root/vaiml_par_0`` (created if needed); returns ``root``."""
    folder = root / PARTITION_DIR
    folder.mkdir(parents=True, exist_ok=True)
    # A half-rewritten directory must not look complete, nor an older layout beside it.
    for stale in (folder / MANIFEST, root / MANIFEST):
        stale.unlink(missing_ok=True)
    blobs = []
    for part in model.partitions:
        name = f"{part.name}.onnx"
        write_atomically(folder / name, part.onnx_bytes)
        blobs.append(
            {"path": name, "size": len(part.onnx_bytes), "crc32": zlib.crc32(part.onnx_bytes)}
        )
    write_atomically(folder / MANIFEST, json.dumps(manifest_of(model, blobs), indent=1).encode())
    return root


def find_manifest_dir(root: Path) -> Path | None:
    """The directory whose ``manifest.json`` describes the model at ``root``: ``root``
    itself (a partition directory, or the older layout), or its one ``vaiml_par_0`` /
    ``par_0`` subdirectory. None when there is none; ModelLoadError when it is ambiguous.
    A manifest that is not a regular file still counts (reading it says what it is)."""
    if os.path.lexists(root / MANIFEST):
        return root
    found = [root / name for name in PARTITION_DIRS if os.path.lexists(root / name / MANIFEST)]
    if len(found) > 1:
        raise ModelLoadError(
            f"{root}: holds both {' and '.join(PARTITION_DIRS)}: which model is meant? "
            "Remove one, or pass the partition directory itself"
        )
    if found:
        return found[0]
    return None


def read_directory(root: Path, boundary: Path | None = None) -> CompiledModel:
    """Load ``root/manifest.json`` and its partition graphs (paths relative to ``root``),
    reading nothing outside ``boundary`` (default ``root``: the directory the user named);
    ModelLoadError on any defect."""
    where = str(root)
    top = root if boundary is None else boundary
    check_inside(root, top, where, root.name)
    text = read_inside(top, root, PurePosixPath(MANIFEST), where, limit=MAX_MANIFEST_BYTES)
    if not text:
        raise ModelLoadError(f"{where}: {MANIFEST} is empty")
    try:
        manifest = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ModelLoadError(f"{where}: {MANIFEST} is not valid JSON: {exc}") from exc

    def read_blob(i: int, blob: Any) -> bytes:
        return _blob(top, root, i, blob, where)

    return model_from_manifest(manifest, read_blob, where)


def _blob(top: Path, root: Path, index: int, blob: Any, where: str) -> bytes:
    if not isinstance(blob, dict) or not isinstance(blob.get("path"), str):
        raise ModelLoadError(f"{where}: partition {index} has no graph path")
    rel = PurePosixPath(blob["path"])
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ModelLoadError(f"{where}: partition {index} path {str(rel)!r} leaves the directory")
    size, crc = blob.get("size"), blob.get("crc32")
    if not _uint(size) or not _uint(crc):
        raise ModelLoadError(f"{where}: partition {index} entry lacks size/crc32")
    data = read_inside(top, root, rel, where, size=size)
    if zlib.crc32(data) != crc:
        raise ModelLoadError(f"{where}: {rel} is corrupted (checksum mismatch)")
    return data


def _uint(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
