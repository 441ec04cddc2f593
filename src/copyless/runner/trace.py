"""Per-job timing trace in Chrome trace-event JSON (open it in Perfetto or chrome://tracing).

Enabled by the ``ai_analyzer_profiling`` option. Each job records complete events ("ph": "X")
for input conversion, each partition's engine run, output conversion and buffer sync, with
the job id in ``args``. The file is written at ``Runner.close()`` (and by ``write()``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from itertools import count
from typing import Any

_FILE_COUNTER = count()


class Trace:
    """Collects events from any thread; cheap when disabled (callers check ``enabled``)."""

    def __init__(self, enabled: bool, path: str | None) -> None:
        self.enabled = enabled
        self._path = path
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @staticmethod
    def now() -> int:
        return time.perf_counter_ns()

    def add(self, name: str, start_ns: int, end_ns: int, job_id: int, **args: Any) -> None:
        event = {
            "name": name,
            "cat": "copyless",
            "ph": "X",
            "ts": start_ns / 1000.0,
            "dur": (end_ns - start_ns) / 1000.0,
            "pid": self._pid,
            "tid": threading.get_ident() % 100000,
            "args": {"job": job_id, **args},
        }
        with self._lock:
            self._events.append(event)

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events)

    def write(self) -> str | None:
        """Write the trace file; returns its path (None when disabled or nothing to write)."""
        if not self.enabled:
            return None
        path = self._path or os.path.join(
            os.getcwd(), f"copyless_trace_{self._pid}_{next(_FILE_COUNTER)}.json"
        )
        with self._lock:
            payload = {"traceEvents": list(self._events), "displayTimeUnit": "ms"}
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(payload, handle)
        os.replace(tmp, path)
        self._path = path
        return path
