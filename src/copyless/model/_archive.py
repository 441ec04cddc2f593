"""The single-file ``.rai`` form of a compiled model.

Layout (little endian)::

    offset 0   header, 64 bytes:
               magic      8s   b"CPYLRAI\\0"
               version    u32  container version (1)
               header     u32  header size (64)
               file_size  u64  total bytes of the file
               man_off    u64  manifest offset      man_size  u64  manifest bytes
               man_crc    u32  CRC-32 of the manifest
               hdr_crc    u32  CRC-32 of the 44 header bytes before it
               (zero padding to 64)
    offset 64  blobs (one ONNX graph per partition), each at a 64-byte aligned offset;
               the manifest's ``partitions[i].blob`` holds ``{offset, size, crc32}``
    last       the manifest (UTF-8 JSON, see :mod:`._manifest`)

The loader memory-maps the file (read-only, shared with the page cache), checks every
length against the real file size before touching the map (a huge declared length fails at
once instead of allocating), verifies the checksums, and copies each blob once out of the
map into ``Partition.onnx_bytes`` (the bytes the engines parse). A file truncated while it
is mapped would kill the process with SIGBUS on the next touch of a page past its new end:
every read of the map goes through :mod:`._mapped`, which turns that SIGBUS into a
ModelLoadError ("file changed while loading"). The map is released before the loader
returns, so a runner never touches its file again.
"""

from __future__ import annotations

import json
import mmap
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..types import AtomicFile, ModelLoadError
from . import _mapped
from ._compiled import CompiledModel
from ._files import open_regular
from ._manifest import manifest_of, model_from_manifest

MAGIC = b"CPYLRAI\0"
VERSION = 1
HEADER_SIZE = 64
ALIGN = 64
_HEADER = struct.Struct("<8sIIQQQII")  # 48 bytes used of the 64
_T = TypeVar("_T")


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def write_archive(model: CompiledModel, path: Path) -> Path:
    """Write ``model`` to ``path`` atomically (a temporary file renamed into place)."""
    blobs, chunks, offset = [], [], HEADER_SIZE
    for part in model.partitions:
        start = _aligned(offset)
        chunks.append((start, part.onnx_bytes))
        blobs.append(
            {"offset": start, "size": len(part.onnx_bytes), "crc32": zlib.crc32(part.onnx_bytes)}
        )
        offset = start + len(part.onnx_bytes)
    manifest = json.dumps(manifest_of(model, blobs), indent=1).encode()
    man_off = _aligned(offset)
    total = man_off + len(manifest)
    head = _HEADER.pack(MAGIC, VERSION, HEADER_SIZE, total, man_off, len(manifest),
                        zlib.crc32(manifest), 0)[:-4]  # fmt: skip
    head += struct.pack("<I", zlib.crc32(head))
    path.parent.mkdir(parents=True, exist_ok=True)
    with AtomicFile(path) as out:
        f = out.file
        f.write(head.ljust(HEADER_SIZE, b"\0"))
        for start, data in chunks:
            f.write(b"\0" * (start - f.tell()))
            f.write(data)
        f.write(b"\0" * (man_off - f.tell()))
        f.write(manifest)
    return path


def read_archive(path: Path) -> CompiledModel:
    """Load a ``.rai`` file; ModelLoadError naming what is wrong for any bad file.

    The file is memory-mapped; a file truncated or rewritten while it loads gives
    ModelLoadError, never SIGBUS (see the module docstring).
    """
    where = str(path)
    fd, size = open_regular(path, where, "the file")  # never blocks on a FIFO
    with open(fd, "rb") as f:
        if size == 0:
            raise ModelLoadError(f"{where}: empty file")
        if size < HEADER_SIZE:
            raise ModelLoadError(
                f"{where}: truncated: {size} bytes, smaller than the {HEADER_SIZE}-byte header"
            )
        view = _map(f.fileno(), size, where)
    with view:
        return _read_mapped(view, size, where)


def _map(fd: int, size: int, where: str) -> mmap.mmap:
    try:
        view = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except (OSError, ValueError, OverflowError) as exc:
        raise ModelLoadError(f"{where}: cannot map the file: {exc}") from exc
    if hasattr(mmap, "MADV_SEQUENTIAL"):
        view.madvise(mmap.MADV_SEQUENTIAL)
    return view


def _read_mapped(view: mmap.mmap, size: int, where: str) -> CompiledModel:
    covered: list[tuple[int, int]] = []

    def read(offset: int, length: int) -> bytes:
        covered.append((offset, offset + length))
        return _guarded(_mapped.copy, view, offset, length, where)

    manifest = _read_manifest(read, size, where)

    def read_blob(i: int, blob: Any) -> bytes:
        return _blob(read, size, i, blob, where)

    model = model_from_manifest(manifest, read_blob, where)
    _check_padding(view, covered, size, where)
    return model


def _guarded(op: Callable[[mmap.mmap, int, int], _T], view: mmap.mmap, offset: int,
             length: int, where: str) -> _T:  # fmt: skip
    """``op(view, offset, length)`` (a :mod:`._mapped` read), ModelLoadError when it faults."""
    try:
        return op(view, offset, length)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"{where}: file changed while loading ({length} bytes at {offset}: {exc})"
        ) from exc


def _check_padding(view: mmap.mmap, covered: list[tuple[int, int]], size: int, where: str) -> None:
    """Bytes no checksum covers (alignment padding) must be zero: else the file is damaged."""
    position = 0
    for start, end in [*sorted(covered), (size, size)]:
        if start > position and not _guarded(
            _mapped.is_zero, view, position, start - position, where
        ):
            raise ModelLoadError(f"{where}: corrupted padding at bytes {position}..{start}")
        position = max(position, end)


def _read_manifest(read: Callable[[int, int], bytes], size: int, where: str) -> Any:
    head = read(0, _HEADER.size)
    magic, version, header, declared, man_off, man_size, man_crc, hdr_crc = _HEADER.unpack(head)
    head_crc = zlib.crc32(head[:-4])
    if magic != MAGIC:
        raise ModelLoadError(f"{where}: not a copyless .rai file (magic {bytes(magic)!r})")
    if version > VERSION:
        raise ModelLoadError(
            f"{where}: .rai container version {version} is newer than this copyless "
            f"supports ({VERSION}); upgrade copyless"
        )
    if head_crc != hdr_crc or header != HEADER_SIZE or version < 1:
        raise ModelLoadError(f"{where}: corrupted header (checksum mismatch)")
    if any(read(_HEADER.size, HEADER_SIZE - _HEADER.size)):
        # Reserved for later versions: a version-1 file has zeros there, so anything else is
        # damage (and would otherwise go unnoticed by every checksum).
        raise ModelLoadError(f"{where}: corrupted header (reserved bytes are not zero)")
    if declared > size:
        raise ModelLoadError(
            f"{where}: truncated: header declares {declared} bytes, file has {size}"
        )
    if declared != size:
        raise ModelLoadError(
            f"{where}: header declares {declared} bytes, file has {size} (trailing data)"
        )
    if man_off < HEADER_SIZE or man_off + man_size > size:
        raise ModelLoadError(
            f"{where}: manifest at {man_off}+{man_size} lies outside the {size}-byte file"
        )
    text = read(man_off, man_size)
    if zlib.crc32(text) != man_crc:
        raise ModelLoadError(f"{where}: corrupted manifest (checksum mismatch)")
    try:
        return json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ModelLoadError(f"{where}: manifest is not valid JSON: {exc}") from exc


def _uint(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def _blob(read: Callable[[int, int], bytes], size: int, index: int, blob: Any, where: str) -> bytes:
    if not isinstance(blob, dict):
        raise ModelLoadError(f"{where}: partition {index} has no blob entry")
    offset, length, crc = (_uint(blob.get(key)) for key in ("offset", "size", "crc32"))
    if offset is None or length is None or crc is None:
        raise ModelLoadError(f"{where}: partition {index} blob entry is malformed: {blob!r}")
    if offset < HEADER_SIZE or offset % ALIGN or offset + length > size:
        raise ModelLoadError(
            f"{where}: partition {index} blob at {offset}+{length} is misaligned or lies "
            f"outside the {size}-byte file"
        )
    data = read(offset, length)
    if zlib.crc32(data) != crc:
        raise ModelLoadError(f"{where}: partition {index} blob is corrupted (checksum mismatch)")
    return data
