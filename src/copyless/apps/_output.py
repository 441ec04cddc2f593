"""What every app prints on stdout, in one of two forms: human lines, or JSON lines.

``--json``: one JSON object a line on stdout, each with a ``"type"`` (what the line is: an
item the app produced, ``"summary"`` last), and no human line at all, so that
``copyless-detect -i a.jpg --json | jq`` reads every line. The final ``summary`` object
carries the run's figures and, under ``"timings"``, the timing block (milliseconds).
``--quiet`` drops the timing block, in both forms. Warnings, notes and errors stay on
stderr in both forms. Progress bars are drawn only when stderr is a terminal
(:func:`progress_wanted`).

The apps write through one :class:`Output`: ``say`` (a human line), ``record`` (a JSON
line), ``timing`` (the timing block: human lines and the summary's ``timings``) and
``summary``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from ..pipeline import StageClock
from ..vision import Box, Detection

__all__ = [
    "Output",
    "add_output_arguments",
    "box_fields",
    "clock_timings",
    "detection_fields",
    "progress_wanted",
]


def add_output_arguments(
    parser: argparse.ArgumentParser, *, json_flag: str = "--json", quiet: bool = True,
    json_help: str | None = None,
) -> None:
    """``--json`` (one JSON object a line on stdout, human lines off) and ``--quiet``
    (no timing block); read back with :meth:`Output.from_args`. ``json_help``: what this
    app's JSON lines are, where they are not one per result then a summary."""
    parser.add_argument(
        json_flag,
        dest="json_lines",
        action="store_true",
        help=json_help or "print one JSON object a line on stdout (one per result, then a "
        "'summary' object with the timings) instead of the human lines",
    )
    if quiet:
        parser.add_argument(
            "--quiet", action="store_true", help="leave out the timing block (and its JSON)"
        )


def progress_wanted(stream: TextIO | None = None) -> bool:
    """Whether to draw a progress bar: only when ``stream`` (stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Output:
    """The stdout of one app run, as human lines or as JSON lines (see the module)."""

    def __init__(self, json_lines: bool = False, quiet: bool = False,
                 stream: TextIO | None = None) -> None:  # fmt: skip
        self.json_lines = json_lines
        self.quiet = quiet
        self._stream = stream
        self._timings: dict[str, Any] = {}

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Output:
        """The output ``--json`` and ``--quiet`` ask for (absent flags: human, with timings)."""
        return cls(bool(getattr(args, "json_lines", False)), bool(getattr(args, "quiet", False)))

    @property
    def stream(self) -> TextIO:
        return sys.stdout if self._stream is None else self._stream

    def say(self, *lines: str, flush: bool = False) -> None:
        """Human lines (nothing with ``--json``)."""
        if not self.json_lines:
            for line in lines:
                print(line, file=self.stream, flush=flush)

    def record(self, kind: str, **fields: Any) -> None:
        """One JSON line ``{"type": kind, **fields}`` (nothing without ``--json``)."""
        if self.json_lines:
            self._write({"type": kind, **fields})

    def timing(self, lines: Iterable[str], timings: Mapping[str, Any]) -> None:
        """The timing block: ``lines`` for a human, ``timings`` (added to the summary's
        ``"timings"``) for JSON; nothing with ``--quiet``."""
        if self.quiet:
            return
        if self.json_lines:
            self._timings.update(timings)
        else:
            self.say(*lines)

    def summary(self, **fields: Any) -> None:
        """The last JSON line: ``{"type": "summary", **fields, "timings": {...}}``
        (``timings`` only when a timing block was given and not ``--quiet``)."""
        if not self.json_lines:
            return
        record: dict[str, Any] = {"type": "summary", **fields}
        if self._timings:
            record["timings"] = dict(self._timings)
        self._write(record)

    def _write(self, record: Mapping[str, Any]) -> None:
        print(json.dumps(_plain(record), allow_nan=False), file=self.stream, flush=True)


def clock_timings(clock: StageClock, stages: Iterable[str]) -> dict[str, float]:
    """``{stage}_ms``: each stage's mean milliseconds per round of ``clock``."""
    snapshot = clock.snapshot()
    return {f"{stage}_ms": round(snapshot[stage].mean * 1e3, 4) for stage in stages}


def box_fields(box: Box) -> dict[str, float]:
    """A box's JSON fields: corners in image pixels (0.1 px) and its score."""
    return {"x0": round(box.x0, 1), "y0": round(box.y0, 1), "x1": round(box.x1, 1),
            "y1": round(box.y1, 1), "score": round(box.score, 4)}  # fmt: skip


def detection_fields(det: Detection) -> dict[str, Any]:
    """A detection's JSON fields: :func:`box_fields`, class id and label."""
    return {**box_fields(det.box), "class_id": det.class_id, "label": det.label}


def _plain(value: Any) -> Any:
    """``value`` with what JSON cannot hold made plain: numpy scalars to Python numbers,
    tuples to lists, paths to strings, NaN/inf to None."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return _plain(item())
    return str(value)
