"""Running a victim in a child process: a signal (SIGBUS, SIGSEGV) or a hang there is a
clean test failure, not the end of the pytest process."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SPAWN = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class ChildOutcome:
    """How a child ended: ``exitcode`` (negative: killed by that signal; None: hung and was
    killed), what its target returned (``value``) or raised (``error``: type name, message)."""

    exitcode: int | None
    value: Any = None
    error: tuple[str, str] | None = None

    @property
    def signalled(self) -> bool:
        return self.exitcode is not None and self.exitcode < 0


class ChildRun:
    """``target(*args)`` started in a spawned process (``target`` importable: a module
    function); :meth:`outcome` waits for it."""

    def __init__(self, target: Callable[..., Any], *args: Any) -> None:
        self._receiver, sender = SPAWN.Pipe(duplex=False)
        self._process = SPAWN.Process(target=_child_main, args=(sender, target, args))
        self._process.start()
        sender.close()

    def outcome(self, timeout: float = 60.0) -> ChildOutcome:
        """How it ended; a child still running after ``timeout`` s is killed (exitcode None)."""
        process, receiver = self._process, self._receiver
        report: Any = None
        if receiver.poll(timeout):
            try:
                report = receiver.recv()
            except EOFError:  # died before reporting (a signal)
                report = None
        process.join(timeout if report is not None else 5.0)
        hung = process.is_alive()
        if hung:
            process.kill()
            process.join()
        code = None if hung else process.exitcode
        process.close()
        receiver.close()
        if report is None:
            return ChildOutcome(code)
        if report[0] == "ok":
            return ChildOutcome(code, value=report[1])
        return ChildOutcome(code, error=(report[1], report[2]))


def run_in_child(target: Callable[..., Any], *args: Any, timeout: float = 60.0) -> ChildOutcome:
    """``target(*args)`` in a spawned process, waited for (see :class:`ChildRun`)."""
    return ChildRun(target, *args).outcome(timeout)


def _child_main(sender: Any, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        value = target(*args)
    except BaseException as exc:  # noqa: BLE001 - reported, not re-raised: the test decides
        sender.send(("raised", type(exc).__name__, str(exc)))
    else:
        sender.send(("ok", value))
    sender.close()
