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
"""

from __future__ import annotations

import json
import os
import tempfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

from ..types import ModelLoadError, apply_umask
from ._compiled import CompiledModel
from ._manifest import manifest_of, model_from_manifest

MANIFEST = "manifest.json"
#: The partition directory copyless writes (the seeds' name), then the names it also reads.
PARTITION_DIR = "vaiml_par_0"
PARTITION_DIRS = (PARTITION_DIR, "par_0")


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` at ``path`` through a temporary file renamed into place: a reader sees the
    old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        apply_umask(fd)  # mkstemp makes it 0600: readable by its writer only
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    ``par_0`` subdirectory. None when there is none; ModelLoadError when it is ambiguous."""
    if (root / MANIFEST).is_file():
        return root
    found = [root / name for name in PARTITION_DIRS if (root / name / MANIFEST).is_file()]
    if len(found) > 1:
        raise ModelLoadError(
            f"{root}: holds both {' and '.join(PARTITION_DIRS)}: which model is meant? "
            "Remove one, or pass the partition directory itself"
        )
    if found:
        return found[0]
    return None


def read_directory(root: Path) -> CompiledModel:
    """Load ``root/manifest.json`` and its partition graphs (paths relative to ``root``);
    ModelLoadError on any defect."""
    where = str(root)
    try:
        text = (root / MANIFEST).read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"{where}: cannot read {MANIFEST}: {exc.strerror or exc}") from exc
    if not text:
        raise ModelLoadError(f"{where}: {MANIFEST} is empty")
    try:
        manifest = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ModelLoadError(f"{where}: {MANIFEST} is not valid JSON: {exc}") from exc

    def read_blob(i: int, blob: Any) -> bytes:
        return _blob(root, i, blob, where)

    return model_from_manifest(manifest, read_blob, where)


def _blob(root: Path, index: int, blob: Any, where: str) -> bytes:
    if not isinstance(blob, dict) or not isinstance(blob.get("path"), str):
        raise ModelLoadError(f"{where}: partition {index} has no graph path")
    rel = PurePosixPath(blob["path"])
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ModelLoadError(f"{where}: partition {index} path {str(rel)!r} leaves the directory")
    path = root.joinpath(*rel.parts)
    size, crc = blob.get("size"), blob.get("crc32")
    try:
        actual = path.stat().st_size
        if isinstance(size, int) and actual != size:
            raise ModelLoadError(
                f"{where}: {rel} is {'truncated' if actual < size else 'longer than declared'}: "
                f"manifest declares {size} bytes, file has {actual}"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"{where}: cannot read {rel}: {exc.strerror or exc}") from exc
    if not isinstance(size, int) or not isinstance(crc, int):
        raise ModelLoadError(f"{where}: partition {index} entry lacks size/crc32")
    if zlib.crc32(data) != crc:
        raise ModelLoadError(f"{where}: {rel} is corrupted (checksum mismatch)")
    return data
