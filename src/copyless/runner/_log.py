"""A runner's own log messages, filtered by its ``log_level`` option.

copyless configures no logging (httpx's rule): no handler, no level set on any logger, on
import or on ``create_runner``; the application decides what is shown. The ``log_level``
option (DEBUG with ``debug``) is a threshold on one runner's own records: below it they
are not emitted at all, at or above it they go to the module's logger as usual, where the
application's configuration applies.

A refusal a caller may repeat in a loop (a submit on memory a job still holds) is logged
through :meth:`RunnerLog.repeated`: the first record of its kind is emitted, the next ones
are counted and summarised in one record ("N more ...") at most every
``REPEAT_INTERVAL_S`` seconds and when the runner closes, so that one misuse is a few
lines, not one per call.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

_LEVELS = {"ERROR": logging.ERROR, "WARNING": logging.WARNING, "INFO": logging.INFO,
           "DEBUG": logging.DEBUG}  # fmt: skip
#: Seconds between the summaries of a repeated record's kind.
REPEAT_INTERVAL_S = 60.0


class RunnerLog:
    """``logger``'s debug/info/warning/error/exception, for records at ``threshold`` and up."""

    __slots__ = ("_lock", "_logger", "_repeats", "threshold")

    def __init__(self, logger: logging.Logger, log_level: str = "INFO", debug: bool = False):
        self._logger = logger
        self.threshold = logging.DEBUG if debug else _LEVELS[log_level]
        self._lock = threading.Lock()
        # kind -> [records held back since the last one emitted, when that one was]
        self._repeats: dict[str, list[Any]] = {}

    def repeated(self, level: int, kind: str, msg: str, *args: Any) -> None:
        """Log ``msg % args`` if it is the first of ``kind`` (or the first after
        ``REPEAT_INTERVAL_S``, then with the count held back since); else count it."""
        if level < self.threshold:
            return
        now = time.monotonic()
        with self._lock:
            held = self._repeats.get(kind)
            if held is not None and now - held[1] < REPEAT_INTERVAL_S:
                held[0] += 1
                return
            skipped = 0 if held is None else held[0]
            self._repeats[kind] = [0, now]
        if skipped:
            msg = f"{msg} (and {skipped} more like it in the last {REPEAT_INTERVAL_S:.0f} s)"
        else:
            msg = f"{msg} (repeats of this refusal are counted, then logged as one line)"
        self._logger.log(level, msg, *args, stacklevel=2)

    def flush(self, level: int = logging.ERROR) -> None:
        """Log the count of each kind's records held back (at close)."""
        with self._lock:
            held = {kind: count for kind, (count, _) in self._repeats.items() if count}
            self._repeats.clear()
        for kind, count in held.items():
            self._emit(level, "%d more %s refusal(s) were not logged one by one", (count, kind))

    def enabled(self, level: int) -> bool:
        return level >= self.threshold and self._logger.isEnabledFor(level)

    def _emit(self, level: int, msg: str, args: tuple[Any, ...], **kwargs: Any) -> None:
        if level >= self.threshold:
            # stacklevel 3: the record names the runner's line, not this wrapper's
            self._logger.log(level, msg, *args, stacklevel=3, **kwargs)

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._emit(logging.DEBUG, msg, args, **kwargs)

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._emit(logging.INFO, msg, args, **kwargs)

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._emit(logging.WARNING, msg, args, **kwargs)

    def error(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._emit(logging.ERROR, msg, args, **kwargs)

    def exception(self, msg: str, *args: Any) -> None:
        self._emit(logging.ERROR, msg, args, exc_info=True)
