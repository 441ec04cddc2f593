"""The on-disk cache of built models and derived files.

Root: ``$COPYLESS_CACHE_DIR`` when set (tests point it at a temporary directory), else
``platformdirs.user_cache_dir("copyless")``. The zoo keeps its models under ``<root>/zoo`` and
its converted photos under ``<root>/photos``.

Writes are atomic: the bytes go to a temporary file in the destination directory, are fsynced,
then ``os.replace``-d over the final name, so a crash never leaves a half-written file under a
final name. Concurrent builders of the same file serialise on an ``flock``-ed lock file; the
second one finds the file done and does not rebuild. :func:`cached_file` caches bytes (the
zoo's ONNX files, photos), :func:`cached_artifact` what a writer writes to a path (every
compiled model the apps, the OCR pipeline and the benchmarks keep:
:func:`~copyless.model.zoo.compiled`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import platformdirs

from ...types import apply_umask

__all__ = ["CACHE_ENV", "atomic_write", "cache_root", "cached_artifact", "cached_file", "locked"]

CACHE_ENV = "COPYLESS_CACHE_DIR"

logger = logging.getLogger(__name__)


def cache_root() -> Path:
    """The cache root directory (not created here)."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir("copyless"))


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + fsync + ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        apply_umask(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
        try:
            write(tmp)
            with open(tmp, "rb") as done:
                os.fsync(done.fileno())
            apply_umask(tmp)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
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
        atomic_write(path, produce())
    logger.debug("cached %s", path)
    return path, True
