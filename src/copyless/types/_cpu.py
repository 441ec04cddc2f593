"""The CPU this process runs on, as ``/proc/cpuinfo`` describes its first processor: read
once, by :func:`cpu_info`, for everything that names or keys on it (the BF16 refusal and
record, INT8's weight range, the engine cache's and the engine choice's keys)."""

from __future__ import annotations

import functools
import hashlib
import platform
from dataclasses import dataclass

__all__ = ["CpuInfo", "cpu_info"]

#: The lines of a processor's entry that describe the CPU (x86: model name and flags; Arm:
#: Features); the engine cache's key digests them.
_DESCRIBING = ("model name", "flags", "Features")


@dataclass(frozen=True, slots=True)
class CpuInfo:
    """``name``: the model name (the platform's processor string where ``/proc/cpuinfo``
    has none); ``flags``: the feature flags (x86 ``flags`` or Arm ``Features``);
    ``machine``: the architecture; ``tag``: a short digest of the architecture and the
    describing lines, which keys what is only valid on this kind of CPU (compiled engines,
    measured engine choices)."""

    name: str
    flags: frozenset[str]
    machine: str
    tag: str

    @property
    def x86(self) -> bool:
        return self.machine.lower() in ("x86_64", "amd64", "i386", "i686")


@functools.cache
def cpu_info() -> CpuInfo:
    """This CPU (read once per process; no copy of the file is kept)."""
    machine = platform.machine()
    described = machine
    name = ""
    flags: frozenset[str] = frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor says it for all
                if not line.startswith(_DESCRIBING):
                    continue
                described += line
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                else:
                    flags = frozenset(value.split())
    except OSError:
        described += platform.processor()
    tag = hashlib.sha1(described.encode(), usedforsecurity=False).hexdigest()[:8]
    return CpuInfo(name or platform.processor() or machine, flags, machine, tag)
