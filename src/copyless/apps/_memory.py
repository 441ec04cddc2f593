"""Memory before work: what an app may use, and the one-line refusal when its estimate for
the input and settings given is more than that (instead of the kernel's OOM killer ending
the run with no message).

What the app may use is the least of: the memory it holds now plus what the kernel counts
as available (``MemAvailable``), a container's limit less what the container uses besides
this process (cgroup v2 ``memory.max`` / ``memory.current``, v1 ``memory.limit_in_bytes``
/ ``memory.usage_in_bytes``, every level of the process's cgroup up to the root), and
``--max-memory``. Each app estimates its peak resident memory from what it measured for
its models (see the constants where they are used) and the sizes of its input, and calls
:meth:`MemoryBudget.check` before the work starts (or before each image, in the apps that
read many: one image too large is one error line, the others go on).
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ._checks import UsageError

__all__ = ["APP_BASE", "MemoryBudget", "add_memory_argument", "gib", "parse_size", "photo_bytes"]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
#: cgroup v1 writes this (or more) for "no limit".
_NO_LIMIT = 1 << 60
_CGROUP = Path("/sys/fs/cgroup")
#: An image app's own peak with its built-in model, before the image: Python, the engine,
#: a model of tens of MB (copyless-zerocopy and copyless-detect --model text measured at
#: 0.3-0.4 GB with a small photo; rounded up).
APP_BASE = 512 << 20
#: Copies of a decoded picture an app holds at once, each 3 bytes a pixel: the decoder's
#: buffer, the upright or converted array, the picture drawn for ``-o``.
_PHOTO_COPIES = 3


def parse_size(text: str) -> int:
    """Bytes of ``512M``, ``6G``, ``2GiB``, ``1.5g`` or a plain number (binary units)."""
    match = _SIZE.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 6G, 2GiB)")
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if value < 1:
        raise argparse.ArgumentTypeError(f"a size must be more than 0 bytes: {text!r}")
    return int(value)


def gib(nbytes: float) -> str:
    """``nbytes`` for people: ``6.2 GiB``, ``740 MiB``."""
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):.1f} GiB"
    return f"{nbytes / (1 << 20):.0f} MiB"


def photo_bytes(path: str | os.PathLike[str], height: int, width: int) -> int:
    """What reading a ``width`` x ``height`` picture from ``path`` holds at its peak: the
    file's bytes and the decoded copies (see :data:`_PHOTO_COPIES`)."""
    try:
        encoded = os.stat(path).st_size
    except OSError:
        encoded = 0
    return encoded + _PHOTO_COPIES * 3 * height * width


def add_memory_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-memory SIZE`` (read back by :meth:`MemoryBudget.of`)."""
    parser.add_argument(
        "--max-memory",
        type=parse_size,
        metavar="SIZE",
        help="refuse work whose memory estimate is more than SIZE (e.g. 2G); the app always "
        "refuses what is more than the free memory or the container's limit",
    )


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    """``limit`` bytes the app's peak may reach, and ``source``: what sets it."""

    limit: int
    source: str

    @classmethod
    def of(cls, max_memory: int | None = None) -> MemoryBudget:
        """The budget of this process now (see the module docstring)."""
        held = _resident()
        candidates = [(held + _available(), "free memory")]
        container = _cgroup_room()
        if container is not None:
            candidates.append((held + container, "the container's memory limit"))
        if max_memory is not None:
            candidates.append((max_memory, "--max-memory"))
        limit, source = min(candidates)
        return cls(limit, source)

    def check(self, estimate: int, what: str, lower: str) -> None:
        """:class:`UsageError` naming the estimate, the budget and ``lower`` (what lowers
        the estimate: a flag and the value that fits) when ``estimate`` exceeds the budget."""
        if estimate > self.limit:
            more = ", or raise --max-memory" if self.source == "--max-memory" else ""
            raise UsageError(
                f"{what} needs about {gib(estimate)} of memory, more than the "
                f"{gib(self.limit)} {self.source} allows: {lower}{more}"
            )


def _resident() -> int:
    """Resident bytes of this process (0 where /proc is not there)."""
    try:
        fields = Path("/proc/self/statm").read_text().split()
        return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _available() -> int:
    """``MemAvailable`` of /proc/meminfo (the kernel's estimate of what can be allocated
    without swapping), else the physical pages free."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _cgroup_room() -> int | None:
    """Bytes the tightest memory limit among this process's cgroups still leaves (v2 and
    v1), or None when no level sets one."""
    rooms = [limit - used for limit, used in _cgroup_limits() if limit < _NO_LIMIT]
    return max(0, min(rooms)) if rooms else None


def _cgroup_limits() -> list[tuple[int, int]]:
    """``(limit, usage)`` at each level of this process's memory cgroups (v2, v1)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: the unified hierarchy
            root, files = _CGROUP, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            root, files = _CGROUP / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        found += _levels(root, path, files)
    return found


def _levels(root: Path, path: str, files: tuple[str, str]) -> list[tuple[int, int]]:
    """The (limit, usage) pairs readable from ``root/path`` up to ``root`` (a container
    often sees its own cgroup as the root: the mount point then holds its limit)."""
    found = []
    folder = root / path.lstrip("/")
    for level in (folder, *folder.parents):
        pair = _read_pair(level, files)
        if pair is not None:
            found.append(pair)
        if level == root:
            break
    return found


def _read_pair(folder: Path, files: tuple[str, str]) -> tuple[int, int] | None:
    try:
        limit_text = (folder / files[0]).read_text().strip()
        used = int((folder / files[1]).read_text().strip())
    except (OSError, ValueError):
        return None
    limit = _NO_LIMIT if limit_text == "max" else int(limit_text)
    return limit, used
