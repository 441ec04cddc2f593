"""Locked memory: mlock when allowed, a logged fallback when RLIMIT_MEMLOCK forbids it."""

from __future__ import annotations

import errno
import json
import logging
import subprocess
import sys

import pytest

from copyless.memory import PAGE_SIZE, HostMemory
from copyless.memory import _host as host


def _vm_locked_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    raise AssertionError("no VmLck in /proc/self/status")


def test_locked_memory_is_really_locked() -> None:
    before = _vm_locked_kb()
    memory = HostMemory.locked(5 * PAGE_SIZE + 1)
    try:
        assert memory.is_locked and memory.nbytes == 5 * PAGE_SIZE + 1
        assert _vm_locked_kb() - before >= 6 * PAGE_SIZE // 1024
    finally:
        memory.close()
    assert _vm_locked_kb() == before


def test_refused_mlock_falls_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[tuple[str, int, int]] = []

    def refuse(address: int, size: int) -> int:
        calls.append(("mlock", address, size))
        return errno.EPERM

    monkeypatch.setattr(host, "_mlock", refuse)
    monkeypatch.setattr(host, "_munlock", lambda a, s: calls.append(("munlock", a, s)))
    with caplog.at_level(logging.WARNING, logger="copyless.memory._host"):
        memory = HostMemory.locked(100)
    try:
        assert not memory.is_locked
        assert memory.address % PAGE_SIZE == 0
        memory.array[:] = 1  # still usable memory
        assert calls == [("mlock", memory.address, PAGE_SIZE)]
    finally:
        memory.close()
    assert calls == [("mlock", calls[0][1], PAGE_SIZE)]  # nothing to munlock
    assert "mlock of 4096 bytes refused" in caplog.text
    assert "Operation not permitted" in caplog.text


# Runs in a child so the rlimit and the dropped capability never touch the test process.
_CHILD = r"""
import ctypes, json, logging, resource, sys
resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))
if sys.argv[1] == "drop-cap":
    # As root, CAP_IPC_LOCK lets mlock ignore the rlimit: drop it (capset v3, bit 14).
    libc = ctypes.CDLL(None, use_errno=True)
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class Data(ctypes.Structure):
        _fields_ = [("eff", ctypes.c_uint32), ("perm", ctypes.c_uint32), ("inh", ctypes.c_uint32)]
    header, data = Header(0x20080522, 0), (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise SystemExit("capget failed")
    data[0].eff &= ~(1 << 14)
    data[0].perm &= ~(1 << 14)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise SystemExit("capset failed")
with open("/proc/self/status") as status:
    caps = int(next(l for l in status if l.startswith("CapEff:")).split()[1], 16)
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("copyless").addHandler(Keep())
from copyless.memory import HostMemory
memory = HostMemory.locked(10000)
memory.array[:] = 3
print(json.dumps({"locked": memory.is_locked, "cap_ipc_lock": bool(caps & (1 << 14)),
                  "nbytes": memory.nbytes, "sum": int(memory.array.sum()), "log": records}))
memory.close()
"""


def _run_child(mode: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_rlimit_zero_without_cap_ipc_lock_falls_back() -> None:
    result = _run_child("drop-cap")
    assert result["cap_ipc_lock"] is False
    assert result["locked"] is False
    assert result["nbytes"] == 10000 and result["sum"] == 30000
    log = result["log"]
    assert isinstance(log, list) and len(log) == 1
    assert "mlock of 12288 bytes refused" in log[0] and "RLIMIT_MEMLOCK" in log[0]


def test_rlimit_zero_locks_only_with_cap_ipc_lock() -> None:
    # With CAP_IPC_LOCK (root here) the kernel ignores RLIMIT_MEMLOCK; without, it refuses.
    result = _run_child("keep-cap")
    assert result["locked"] is result["cap_ipc_lock"]
    assert (result["log"] == []) is result["cap_ipc_lock"]
