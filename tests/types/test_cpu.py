"""The one reader of /proc/cpuinfo (the engine cache's tag, the engine choice's record, the
BF16 refusal, INT8's weight bits: tests/model/test_compiler_int8.py): what it reports
matches the file."""

from __future__ import annotations

import hashlib
import platform

from copyless.types import CpuInfo, cpu_info


def _first_processor() -> list[str]:
    lines = []
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.strip():
                break
            lines.append(line)
    return lines


def test_cpu_info_reads_the_first_processor() -> None:
    cpu = cpu_info()
    assert isinstance(cpu, CpuInfo) and cpu_info() is cpu  # read once
    lines = _first_processor()
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    assert cpu.name == (names[0] if names else platform.processor() or platform.machine())
    flag_lines = [line for line in lines if line.startswith(("flags", "Features"))]
    assert cpu.flags == frozenset(flag_lines[0].split(":", 1)[1].split())
    if cpu.x86:
        assert {"sse2"} <= cpu.flags  # every x86_64 CPU has it
    # the tag digests what the engine cache keyed on before this reader existed (caches
    # written then stay valid): the architecture and the describing lines, in file order
    described = platform.machine() + "".join(
        line for line in lines if line.startswith(("model name", "flags", "Features"))
    )
    assert cpu.tag == hashlib.sha1(described.encode(), usedforsecurity=False).hexdigest()[:8]

