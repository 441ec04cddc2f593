"""Writing files: atomically, with the mode ``open()`` would give them. The one owner for
every file copyless writes in place of another (compiled models, the zoo's cache, the
engines' caches, the engine choice, Parquet results), at the floor every layer reaches.

A file is written under a fresh temporary name beside its destination, flushed to disk and
renamed over the destination in one step (:func:`os.replace`): a reader, or a run that
crashed, sees the old file or the new one, never half of one; an error removes the
temporary file. :class:`AtomicFile` is a file object written that way,
:func:`write_atomically` writes bytes through one, :func:`atomic_path` gives a writer that
takes a path (the compiler, an engine saving its optimized graph) a temporary one.

``tempfile.mkstemp`` creates its file 0600 whatever the umask, so a file written through a
temporary file would stay private to its writer: another user or a Ray worker under another
uid could not read it. :func:`apply_umask` gives it ``0666 & ~umask`` instead (every
function here does).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["AtomicFile", "apply_umask", "atomic_path", "umask", "write_atomically"]

_lock = threading.Lock()


def umask() -> int:
    """The process's umask, read from ``/proc/self/status`` (Linux 4.7+), else by setting
    and restoring it under a lock (``os.umask`` has no read-only form)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def apply_umask(fd_or_path: int | str | os.PathLike[str]) -> None:
    """chmod an open file descriptor (or a path) to ``0666 & ~umask``."""
    mode = 0o666 & ~umask()
    if isinstance(fd_or_path, int):
        os.fchmod(fd_or_path, mode)
    else:
        os.chmod(fd_or_path, mode)


class AtomicFile:
    """A binary file that becomes ``path`` on :meth:`commit`, and never otherwise.

    Written under a hidden temporary name in ``path``'s directory (which must exist);
    :meth:`commit` fsyncs it and renames it over ``path``; :meth:`discard`, an exception in
    the ``with`` block, or the object dropped uncommitted removes it. ``file`` is the open
    file object (pass it to a writer that streams: ``pq.ParquetWriter(out.file, ...)``).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.",
                                   suffix=".tmp")  # fmt: skip
        self._tmp = Path(tmp)
        try:
            apply_umask(fd)  # mkstemp makes it 0600: readable by its writer only
            self._file: IO[bytes] = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            self._tmp.unlink(missing_ok=True)
            raise
        # never captures self: a dropped, uncommitted file removes its temporary name
        self._finalizer = weakref.finalize(self, _remove, self._file, self._tmp)

    @property
    def file(self) -> IO[bytes]:
        """The temporary file, open for writing (closed once committed or discarded)."""
        return self._file

    @property
    def done(self) -> bool:
        """Whether :meth:`commit` or :meth:`discard` has run."""
        return not self._finalizer.alive

    def commit(self) -> Path:
        """Flush the file to disk and rename it over ``path``; returns ``path``. On an error
        the temporary file is removed and the destination is left as it was."""
        if self.done:
            raise ValueError(f"{self.path}: already committed or discarded")
        self._finalizer.detach()
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self._tmp, self.path)
        except BaseException:
            _remove(self._file, self._tmp)
            raise
        return self.path

    def discard(self) -> None:
        """Remove the temporary file; the destination is left as it was (idempotent)."""
        self._finalizer()

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self.discard()
        elif not self.done:
            self.commit()


def _remove(file: IO[bytes], tmp: Path) -> None:
    with contextlib.suppress(OSError):
        file.close()
    with contextlib.suppress(OSError):
        tmp.unlink()


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """``data`` at ``path`` through an :class:`AtomicFile`: a reader sees the old file or
    the new one, never half of one. ``path``'s directory must exist."""
    with AtomicFile(path) as out:
        out.file.write(data)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A fresh name beside ``path``, with ``path``'s suffix (a writer may read it: the
    compiler writes ``.rai`` by name), for a writer that takes a path. When the block ends
    without an error, the file written there is fsynced, given the umask's mode and renamed
    over ``path``; on an error (or when the block raises) it is removed."""
    final = Path(path)
    tmp = final.with_name(f".{final.stem}.{os.getpid()}.{threading.get_ident()}"
                          f".tmp{final.suffix}")  # fmt: skip
    try:
        yield tmp
        with open(tmp, "rb") as done:
            os.fsync(done.fileno())
        apply_umask(tmp)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
