"""The on-disk cache of built models and derived files.

Root: ``$COPYLESS_CACHE_DIR`` when set (tests point it at a temporary directory), else
``platformdirs.user_cache_dir("copyless")``. The zoo keeps its models under ``<root>/zoo`` and
its converted photos under ``<root>/photos``.

Writes are atomic (:func:`copyless.types.write_atomically`, :func:`copyless.types.atomic_path`):
a crash never leaves a half-written file under a final name. Concurrent builders of the same
file serialise on an ``flock``-ed lock file; the second one finds the file done and does not
rebuild. :func:`cached_file` caches bytes (the
zoo's ONNX files, photos), :func:`cached_artifact` what a writer writes to a path (every
compiled model the apps, the OCR pipeline and the benchmarks keep:
:func:`~copyless.model.zoo.compiled`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import platformdirs

from ...types import atomic_path, write_atomically

__all__ = ["CACHE_ENV", "cache_root", "cached_artifact", "cached_file", "locked"]

CACHE_ENV = "COPYLESS_CACHE_DIR"

logger = logging.getLogger(__name__)


def cache_root() -> Path:
    """The cache root directory (not created here)."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir("copyless"))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<path>.lock`` (created if needed) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def cached_artifact(path: Path, write: Callable[[Path], object]) -> tuple[Path, bool]:
    """Return ``(path, built)``: ``path`` made by ``write(tmp)`` (a writer of files: the
    compiler) unless it already exists. As :func:`cached_file`: at most one writer per
    missing file across processes (the others wait on the lock and find it done); the file
    is written under a temporary name beside ``path``, fsynced and renamed, so a crash
    never leaves a partial artifact under the final name."""
    if path.is_file():
        return path, False
    with locked(path):
        if path.is_file():
            return path, False
        with atomic_path(path) as tmp:
            write(tmp)
    logger.debug("cached %s", path)
    return path, True


def cached_file(path: Path, produce: Callable[[], bytes]) -> tuple[Path, bool]:
    """Return ``(path, built)``: ``path`` made by ``produce()`` unless it already exists.

    ``built`` is False on a cache hit. ``produce`` runs at most once per missing file, even
    across processes.
    """
    if path.is_file():
        return path, False
    with locked(path):
        if path.is_file():  # another process finished it while we waited
            return path, False
        write_atomically(path, produce())
    logger.debug("cached %s", path)
    return path, True
