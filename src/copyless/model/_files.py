"""Reading the files of a model directory without leaving it or blocking on them.

Users load model directories that others gave them, so a file the loader reads must be:

* inside the directory the user named: its real path (symlinks resolved) lies under the
  directory's real path. A symlink that stays inside is fine; one that leaves it (to
  ``~/.ssh/id_rsa``, ``/etc/shadow``) is refused before anything is opened;
* a regular file: a FIFO would block the loader forever, a device (``/dev/zero``) would
  never end. Opened with ``O_NONBLOCK`` (a FIFO then opens at once) and checked with
  ``fstat`` on the open descriptor, so a file swapped in after the check is caught too;
* of the size the caller expects (the manifest's, or a limit), checked before one byte is
  read, and read in full (a file that shrinks meanwhile is refused, never half-read).

Every refusal is one :class:`ModelLoadError` that names the file and why.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from ..types import ModelLoadError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def check_inside(path: Path, boundary: Path, where: str, shown: object) -> Path:
    """``path`` with its symlinks resolved; ModelLoadError when that leaves ``boundary``."""
    real = Path(os.path.realpath(path))
    top = Path(os.path.realpath(boundary))
    if real != top and top not in real.parents:
        raise ModelLoadError(
            f"{where}: {shown} is a symlink to {real}, outside the model directory {top}: "
            "refused (a model directory must hold its own files)"
        )
    return real


def open_regular(path: Path, where: str, shown: object) -> tuple[int, int]:
    """``(fd, size)`` of ``path`` opened read-only, refusing anything but a regular file
    (never blocking on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ModelLoadError(f"{where}: cannot read {shown}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        for test, what in _KINDS:
            if test(info.st_mode):
                raise ModelLoadError(f"{where}: {shown} is {what}, not a regular file: refused")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, int(info.st_size)


def read_inside(
    boundary: Path,
    root: Path,
    rel: PurePosixPath,
    where: str,
    *,
    size: int | None = None,
    limit: int | None = None,
) -> bytes:
    """The bytes of regular file ``root/rel``, which must stay inside ``boundary``; its size
    must be ``size`` (when given) and at most ``limit`` (when given), checked before
    reading. ModelLoadError naming the file for every refusal."""
    real = check_inside(root.joinpath(*rel.parts), boundary, where, rel)
    fd, actual = open_regular(real, where, rel)
    try:
        if size is not None and actual != size:
            state = "truncated" if actual < size else "longer than declared"
            raise ModelLoadError(
                f"{where}: {rel} is {state}: manifest declares {size} bytes, file has {actual}"
            )
        if limit is not None and actual > limit:
            raise ModelLoadError(f"{where}: {rel} is {actual} bytes, more than {limit} allowed")
        return _read_exactly(fd, actual, where, rel)
    finally:
        os.close(fd)


def _read_exactly(fd: int, size: int, where: str, rel: PurePosixPath) -> bytes:
    try:
        # A buffered read of `size` reads straight into the result, looping on short reads.
        with open(fd, "rb", closefd=False) as f:
            data = f.read(size)
    except OSError as exc:
        raise ModelLoadError(f"{where}: cannot read {rel}: {exc.strerror or exc}") from exc
    if len(data) != size:
        raise ModelLoadError(f"{where}: {rel} shrank while loading ({len(data)} of {size} bytes)")
    return data
