"""Reliability helpers: the shared conv net at 8x8, .rai packing with lies, a crash-safe load child.

``pack_rai`` writes the ``.rai`` container itself (not through ``write_archive``) so a test
can seal mutated blobs and manifests with *valid* checksums: a mutation then gets past the
CRC checks and reaches the JSON, manifest, ONNX and onnxruntime parsers.
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from copyless.model._archive import ALIGN, HEADER_SIZE, MAGIC, VERSION

# Child processes import this module with only this folder on sys.path (they run in it);
# the shared model is one folder up (under pytest it is already there: the rootdir conftest).
sys.path.append(str(Path(__file__).resolve().parents[1]))
from model_helpers import conv_net

_HEADER = struct.Struct("<8sIIQQQII")
WORKER = Path(__file__).with_name("load_worker.py")


def small_net(batch: int | str = 1, size: int = 8) -> onnx.ModelProto:
    """The shared conv net (model_helpers.conv_net) at 8x8: real, and fast to run."""
    return conv_net(batch, size)


# -- the .rai container, written by hand ------------------------------------------------
def parse_rai(data: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """The manifest and partition blobs of a well-formed ``.rai``."""
    _m, _v, _h, _size, man_off, man_size, _c, _hc = _HEADER.unpack(data[: _HEADER.size])
    manifest = json.loads(data[man_off : man_off + man_size])
    blobs = []
    for part in manifest["partitions"]:
        blob = part["blob"]
        blobs.append(data[blob["offset"] : blob["offset"] + blob["size"]])
    return manifest, blobs


def seal_header(total: int, man_off: int, man_size: int, man_crc: int, **lies: int) -> bytes:
    """A 64-byte header with a valid header CRC; ``lies`` override any field first."""
    fields = {"version": VERSION, "header": HEADER_SIZE, "total": total,
              "man_off": man_off, "man_size": man_size, "man_crc": man_crc}  # fmt: skip
    fields.update(lies)
    order = ("version", "header", "total", "man_off", "man_size", "man_crc")
    head = _HEADER.pack(MAGIC, *(fields[k] for k in order), 0)[:-4]
    return (head + struct.pack("<I", zlib.crc32(head))).ljust(HEADER_SIZE, b"\0")


def pack_rai(
    manifest: dict[str, Any],
    blobs: list[bytes],
    edit: Callable[[dict[str, Any]], None] | None = None,
    manifest_bytes: bytes | None = None,
    **header_lies: int,
) -> bytes:
    """A ``.rai`` of ``blobs`` whose blob entries and checksums are all correct, then
    ``edit`` applied to the manifest (or ``manifest_bytes`` used raw), sealed with valid CRCs."""
    manifest = json.loads(json.dumps(manifest))
    body, offset = bytearray(), HEADER_SIZE
    for part, blob in zip(manifest["partitions"], blobs, strict=False):
        start = -(-offset // ALIGN) * ALIGN
        body += b"\0" * (start - offset) + blob
        part["blob"] = {"offset": start, "size": len(blob), "crc32": zlib.crc32(blob)}
        offset = start + len(blob)
    if edit is not None:
        edit(manifest)
    text = manifest_bytes if manifest_bytes is not None else json.dumps(manifest).encode()
    man_off = -(-offset // ALIGN) * ALIGN
    body += b"\0" * (man_off - offset) + text
    fields = {"total": man_off + len(text), "man_off": man_off, "man_size": len(text),
              "man_crc": zlib.crc32(text)}  # fmt: skip
    fields.update(header_lies)
    return seal_header(**fields) + bytes(body)


def write_par_dir(
    root: Path,
    manifest: dict[str, Any],
    graph: bytes,
    edit: Callable[[dict[str, Any]], None],
    older: bool = False,
) -> Path:
    """The directory form: ``graph`` as ``vaiml_par_0/par_0.onnx`` beside its manifest (or,
    ``older``, the layout before 0.2: ``par_0/model.onnx`` with the manifest at the top),
    its entry sealed, then ``edit`` applied to the manifest."""
    manifest = json.loads(json.dumps(manifest))
    folder = root if older else root / "vaiml_par_0"
    rel = "par_0/model.onnx" if older else "par_0.onnx"
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    (folder / rel).write_bytes(graph)
    for part in manifest["partitions"]:
        part["blob"] = {"path": rel, "size": len(graph), "crc32": zlib.crc32(graph)}
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return root


# -- a child process that loads models and survives nothing -----------------------------
class LoadChild:
    """A child running ``load_worker.py``: each :meth:`load` sends one path and reads one
    JSON result line. A native crash or hang of the child becomes a result of its own
    (``outcome`` "crash"/"hang") and a fresh child serves the next request."""

    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.requests = 0
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._log.seek(0)
            self._log.truncate()
            self._proc = subprocess.Popen(
                [sys.executable, str(WORKER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
            )
        return self._proc

    def load(self, path: Path) -> dict[str, Any]:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        self.requests += 1
        try:
            proc.stdin.write(str(path).encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            return self._dead(proc)
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout_s)
        if not ready:
            proc.kill()
            proc.wait()
            return {"outcome": "hang", "detail": f"no answer in {self.timeout_s} s"}
        line = proc.stdout.readline()
        if not line:
            return self._dead(proc)
        try:
            result: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            return {"outcome": "garbled", "detail": line[:500].decode(errors="replace")}
        return result

    def _dead(self, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        code = proc.wait()
        self._log.seek(0)
        tail = self._log.read()[-3000:].decode(errors="replace")
        return {"outcome": "crash", "detail": f"child exited with {code}: {tail}"}

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc is not None:
            for stream in (self._proc.stdout, self._proc.stdin):
                if stream is not None and not stream.closed:
                    stream.close()
        self._log.close()


def rss_bytes() -> int:
    import psutil

    return int(psutil.Process(os.getpid()).memory_info().rss)


_RACE = """
import threading, time
from copyless.model import load_model
from copyless.types import ModelLoadError
path, seconds, cut = {path!r}, {seconds!r}, {cut!r}
data = open(path, "rb").read()
stop = threading.Event()
def writer():
    while not stop.is_set():
        with open(path, "r+b") as f:
            f.truncate(len(data) // 3 if cut is None else cut)
            f.seek(0)
            f.write(data)
t = threading.Thread(target=writer)
t.start()
loaded = rejected = 0
end = time.monotonic() + seconds
try:
    while time.monotonic() < end:
        try:
            load_model(path)
            loaded += 1
        except ModelLoadError:
            rejected += 1
finally:
    stop.set()
    t.join()
print(loaded, rejected)
"""


def truncation_race(
    path: Path, seconds: float, cut: int | None = None
) -> tuple[int, int, subprocess.CompletedProcess[str]]:
    """A child loads ``path`` in a loop for ``seconds`` while a thread of it keeps cutting
    the file short (to ``cut`` bytes, default a third) and writing it back under the
    loader's map: ``(loaded, rejected, the child's result)``; (0, 0, result) if it died."""
    code = _RACE.format(path=str(path), seconds=seconds, cut=cut)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=seconds + 120, check=False)  # fmt: skip
    if result.returncode != 0:
        return 0, 0, result
    loaded, rejected = map(int, result.stdout.split())
    return loaded, rejected, result
