"""How busy the machine is: the share of the CPUs other processes use (the engine choice
says when it measured on a busy machine, see :mod:`._choice`)."""

from __future__ import annotations

import os
import time

#: Others using more than this share of the CPUs make the machine busy.
BUSY_SHARE = 0.25


class CpuLoad:
    """The share of the CPUs other processes use from now until :meth:`others_share`:
    ``/proc/stat``'s busy time less this process's own CPU time (its engine threads
    included), over the CPUs' wall time. Without ``/proc``: the 1-minute load average less
    this process's share, per CPU."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.mine = time.process_time()
        self.busy = _proc_busy()

    def others_share(self) -> float | None:
        wall = time.perf_counter() - self.wall
        mine = time.process_time() - self.mine
        cpus = os.cpu_count() or 1
        busy = _proc_busy()
        if self.busy is not None and busy is not None and wall > 0:
            return max(0.0, (busy - self.busy) - mine) / (cpus * wall)
        try:
            load = os.getloadavg()[0]
        except OSError:
            return None
        return max(0.0, load - (mine / wall if wall > 0 else 0.0)) / cpus


def _proc_busy() -> float | None:
    """Seconds every CPU spent busy since boot (``/proc/stat``'s first line, idle and iowait
    left out), or None without it."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / (os.sysconf("SC_CLK_TCK") or 100)


def machine_busy(seconds: float = 0.1) -> bool:
    """Whether other processes use more than :data:`BUSY_SHARE` of the CPUs now (sampled
    over ``seconds``)."""
    load = CpuLoad()
    time.sleep(seconds)
    share = load.others_share()
    return share is not None and share > BUSY_SHARE
