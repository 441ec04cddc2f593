"""A runner's own log messages, filtered by its ``log_level`` option.

copyless configures no logging (httpx's rule): no handler, no level set on any logger, on
import or on ``create_runner``; the application decides what is shown. The ``log_level``
option (DEBUG with ``debug``) is a threshold on one runner's own records: below it they
are not emitted at all, at or above it they go to the module's logger as usual, where the
application's configuration applies.
"""

from __future__ import annotations

import logging
from typing import Any

_LEVELS = {"ERROR": logging.ERROR, "WARNING": logging.WARNING, "INFO": logging.INFO,
           "DEBUG": logging.DEBUG}  # fmt: skip


class RunnerLog:
    """``logger``'s debug/info/warning/error/exception, for records at ``threshold`` and up."""

    __slots__ = ("_logger", "threshold")

    def __init__(self, logger: logging.Logger, log_level: str = "INFO", debug: bool = False):
        self._logger = logger
        self.threshold = logging.DEBUG if debug else _LEVELS[log_level]

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
