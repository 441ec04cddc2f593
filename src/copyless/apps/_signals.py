"""SIGINT and SIGTERM in every app: stop the sources, let the running work end, finalise the
outputs, print the summary, exit 130 (SIGINT) / 143 (SIGTERM) with one line, no traceback.

::

    with Interruption() as interrupted:
        with Pipeline(...) as pipeline:
            interrupted.on_signal(pipeline.stop)   # the first signal stops the sources
            for result in pipeline.map(items):
                ...                                # the items in flight still come out
        ...                                        # finalise outputs, print the summary
    return interrupted.exit_code(0)                # 130 / 143 after a signal, with its line

The first signal only asks to stop (the callbacks registered with :meth:`on_signal`); a
second one raises KeyboardInterrupt in the main thread (a user who presses Ctrl-C twice
means it), which the app turns into the same exit code. Handlers are installed only from
the main thread (elsewhere, e.g. an app run in-process by a test from a worker thread,
nothing is installed) and restored on exit.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = ["EXIT_SIGINT", "EXIT_SIGTERM", "Interruption", "Terminated", "default_handlers",
           "held", "stopped"]

EXIT_SIGINT = 128 + signal.SIGINT  # 130
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM where no app handler is installed (the launcher's): unwinds as Ctrl-C does,
    and says which signal it was."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def default_handlers() -> dict[int, Any]:
    """Outside an app's :class:`Interruption` (imports, model builds, an app with no run
    loop): SIGTERM unwinds as Ctrl-C does (:class:`Terminated`); the previous handlers are
    returned. Main thread only (elsewhere nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signal.SIGTERM: signal.signal(signal.SIGTERM, _terminate)}


def stopped(prog: str, exc: KeyboardInterrupt) -> int:
    """The one line and the exit status for a signal that unwound an app."""
    sig = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
    print(f"{prog}: stopped by {sig.name}", file=sys.stderr, flush=True)
    return 128 + sig


class Interruption:
    """Catches SIGINT/SIGTERM for an app's run (see the module docstring)."""

    def __init__(self, prog: str = "") -> None:
        self.prog = prog
        self.signal: int | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._previous: dict[int, Any] = {}
        self._lock = threading.Lock()

    @property
    def interrupted(self) -> bool:
        return self.signal is not None

    def on_signal(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (e.g. ``pipeline.stop``) on the first signal; at once when one
        has already arrived."""
        with self._lock:
            self._callbacks.append(callback)
            arrived = self.signal is not None
        if arrived:
            callback()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is not None:  # the second signal: stop now
            raise KeyboardInterrupt
        self.signal = signum
        for callback in list(self._callbacks):
            callback()

    def note(self, signum: int) -> None:
        """Record a signal that arrived as a KeyboardInterrupt (the default SIGINT handler,
        before :meth:`__enter__` or after a second signal)."""
        if self.signal is None:
            self.signal = signum

    def exit_code(self, code: int) -> int:
        """``code``, or after a signal 130 / 143 with one line on stderr saying so."""
        if self.signal is None:
            return code
        name = signal.Signals(self.signal).name
        where = f"{self.prog}: " if self.prog else ""
        print(f"{where}stopped by {name}", file=sys.stderr, flush=True)
        return 128 + self.signal

    def __enter__(self) -> Interruption:
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            # a second signal, or one before the handlers (the launcher's SIGTERM too)
            self.note(signal.SIGTERM if issubclass(kind, Terminated) else signal.SIGINT)
            return True  # swallowed: the app returns exit_code(...)
        return False


@contextlib.contextmanager
def held() -> Iterator[None]:
    """SIGINT/SIGTERM held (blocked, left pending) in the calling thread while the block runs:
    for an engine call made on the main thread. A signal that arrived while copyless-zerocopy's
    main thread was inside onnxruntime's run crashed the process about one time in three
    (SIGSEGV in the engine, tests/apps/test_image_app_signals.py); held, it is delivered when
    the call returns and the app's handler sees it as before. No-op off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
