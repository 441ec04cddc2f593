"""File modes: what copyless writes gets the mode ``open()`` would give it.

``tempfile.mkstemp`` creates its file 0600 whatever the umask, so a file written through a
temporary file and renamed into place (compiled models, the zoo cache, Parquet results)
would stay private to its writer: another user or a Ray worker under another uid could not
read it. :func:`apply_umask` gives it ``0666 & ~umask`` instead.
"""

from __future__ import annotations

import os
import threading

__all__ = ["apply_umask", "umask"]

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
