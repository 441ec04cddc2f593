"""Per-job timing trace in Chrome trace-event JSON (open it in Perfetto or chrome://tracing).

Enabled by the ``ai_analyzer_profiling`` option. Each job records complete events ("ph": "X")
for input conversion, each partition's engine run, output conversion and buffer sync, with
the job id in ``args``.

Bounded: events are streamed to the trace file (``profile_path``, default
``./copyless_trace_<pid>_<n>.json``) in batches of :data:`FLUSH_EVENTS`, so a long run holds
at most that many in memory. The file uses the trace format's JSON *array* form: ``[`` when
the runner is created, the events as they come, ``]`` at ``Runner.close()``. A run cut short
leaves the closing bracket out, which that form allows: Perfetto still opens the file.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from itertools import count
from typing import IO, Any

from ..types import OptionError

logger = logging.getLogger(__name__)
_FILE_COUNTER = count()

#: Events held in memory before they are appended to the trace file.
FLUSH_EVENTS = 1024


class Trace:
    """Collects events from any thread; cheap when disabled (callers check ``enabled``)."""

    def __init__(self, enabled: bool, path: str | None) -> None:
        self.enabled = enabled
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._count = 0
        self._first = True
        self._file: IO[str] | None = None
        self.path: str | None = None
        if enabled:
            self.path = path or os.path.join(
                os.getcwd(), f"copyless_trace_{self._pid}_{next(_FILE_COUNTER)}.json"
            )
            try:
                self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - close()
            except OSError as exc:
                raise OptionError(f"cannot write the profiling trace {self.path!r}: {exc}") from exc
            self._file.write("[\n")

    @staticmethod
    def now() -> int:
        return time.perf_counter_ns()

    def add(self, name: str, start_ns: int, end_ns: int, job_id: int | str, **args: Any) -> None:
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
            if self._file is None:
                return  # closed: a job that outlived close() records nothing more
            self._pending.append(event)
            self._count += 1
            if len(self._pending) >= FLUSH_EVENTS:
                self._flush()

    @property
    def count(self) -> int:
        """Events recorded so far (written or about to be)."""
        return self._count

    @property
    def held(self) -> int:
        """Events held in memory, not yet in the file (at most :data:`FLUSH_EVENTS`)."""
        return len(self._pending)

    def _flush(self) -> None:
        """Append the pending events to the file. Call with the lock held."""
        if self._file is None or not self._pending:
            return
        try:
            for event in self._pending:
                self._file.write(("" if self._first else ",\n") + json.dumps(event))
                self._first = False
            self._file.flush()
        except OSError as exc:  # disk full: the trace is lost, the jobs are not
            logger.error("profiling trace %s: cannot write (%s); tracing stops", self.path, exc)
            self._close_file(terminate=False)
        self._pending.clear()

    def write(self) -> str | None:
        """Flush, terminate and close the trace file; its path (None when disabled)."""
        if not self.enabled:
            return None
        with self._lock:
            self._flush()
            self._close_file(terminate=True)
        return self.path

    def _close_file(self, terminate: bool) -> None:
        if self._file is None:
            return
        try:
            if terminate:
                self._file.write("\n]\n")
            self._file.close()
        except OSError as exc:
            logger.error("profiling trace %s: cannot close (%s)", self.path, exc)
        self._file = None
