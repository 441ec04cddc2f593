"""Engine caches under the runner option ``cache_path``: what an engine compiled once is
loaded from there the next time, so that a second load of the same model is faster.

Layout (one folder per partition graph, then one per engine build)::

    <cache_path>/<digest>/par_0.onnx             the graph as a file (OpenVINO compiles
                                                 from a path: its cache is keyed by it)
    <cache_path>/<digest>/onnxruntime-<tag>/     ONNX Runtime's optimized graph
    <cache_path>/<digest>/openvino-<tag>/        OpenVINO's CACHE_DIR
    <cache_path>/<digest>/tensorrt-<tag>/        TensorRT engines (``trt_engine_cache_path``)

``<digest>`` is the SHA-1 of the partition's graph bytes (another model, or the same model
compiled with other options, gets another folder); ``<tag>`` names the engine version and
what else its build depends on (execution provider, device, this CPU's model and flags, as
onnxruntime's fully optimized graphs use the CPU's vector extensions). Entries are written
to a temporary name and renamed, so a reader never sees half a file; an entry an engine
cannot load is logged, deleted and rebuilt. Nothing is ever evicted: delete the folder to
reclaim the space.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from pathlib import Path

from ..model import Partition
from ..types import OptionError, write_atomically

logger = logging.getLogger(__name__)


class EngineCache:
    """The cache folder of one runner; counts what it served and what it stored."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=self.root, prefix=".probe.")  # noqa: SIM115
            probe.close()
        except OSError as exc:
            raise OptionError(
                f"option 'cache_path': cannot use {str(self.root)!r} as a cache folder: {exc}"
            ) from exc
        self._lock = threading.Lock()
        self._digests: dict[int, tuple[bytes, str]] = {}
        self.hits = 0
        self.stored = 0

    def folder(self, partition: Partition, engine: str) -> Path:
        """The folder of ``partition``'s ``engine`` build (created), e.g. for TensorRT's
        ``trt_engine_cache_path``: ``cache.folder(partition, f"tensorrt-{version}")``."""
        path = self.root / self._digest(partition) / engine
        path.mkdir(parents=True, exist_ok=True)
        return path

    def graph_file(self, partition: Partition) -> Path:
        """``partition``'s graph as a file in the cache (written once)."""
        path = self.root / self._digest(partition) / f"{partition.name}.onnx"
        if not path.is_file() or path.stat().st_size != len(partition.onnx_bytes):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, partition.onnx_bytes)
        return path

    def note(self, *, hit: bool) -> None:
        """Count one engine loaded from the cache (``hit``) or built and stored."""
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.stored += 1

    def describe(self) -> dict[str, object]:
        with self._lock:
            return {"path": str(self.root), "hits": self.hits, "stored": self.stored}

    def _digest(self, partition: Partition) -> str:
        data = partition.onnx_bytes
        with self._lock:
            known = self._digests.get(id(data))
            if known is not None and known[0] is data:
                return known[1]
        digest = hashlib.sha1(data, usedforsecurity=False).hexdigest()[:20]
        with self._lock:
            self._digests[id(data)] = (data, digest)  # holds data: its id stays its own
        return digest
