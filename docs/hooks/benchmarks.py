"""mkdocs hook: the benchmark tables, generated from the JSON records in docs/benchmarks/data.

A page marks where the tables go with ``<!-- benchmark-tables -->`` (every record) or
``<!-- benchmark-tables: NAME NAME -->`` (those records, by file stem). Each record is one
benchmark run: what was run (``command``), when (``date``), where (``machine``: the CPU and
its cores, library versions) and under what load (``load``), where the figures come from
(``source``) and ``rows`` of figures, one table row each; the columns are the first row's
keys, in order. ``python benchmarks/video.py --json FILE`` writes such a record; records of
runs made before the scripts wrote JSON were transcribed from the README of their day and say
so in ``source``.

A record keeps the command it ran. Before issue 53 the checkout's programs were launched as
``copyless-bench NAME``; the page shows such a command as it runs today (:func:`runnable`:
``python benchmarks/NAME.py``, the same program with the same arguments).

The same functions are imported by tests/test_docs_benchmarks.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!--\s*benchmark-tables(?::\s*(?P<names>[\w\s.-]+?))?\s*-->")
REQUIRED = ("title", "command", "date", "machine", "load", "source", "rows")
#: ``copyless-bench NAME`` for a NAME that is no suite of copyless-bench's: a checkout program.
LAUNCHED = re.compile(r"\bcopyless-bench (?!(?:peers|prefix|spin)\b)([a-z][a-z0-9_]*)")


def runnable(command: str) -> str:
    """``command`` as it runs today: each ``copyless-bench NAME`` that launched a program of
    the checkout becomes ``python benchmarks/NAME.py``; the rest is kept as recorded."""
    return LAUNCHED.sub(r"python benchmarks/\1.py", command)


def load_records(folder: Path) -> dict[str, dict[str, Any]]:
    """Every record in ``folder``, by file stem, newest first; a malformed one raises."""
    records: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        missing = [key for key in REQUIRED if key not in record]
        if missing:
            raise ValueError(f"{path}: missing {', '.join(missing)}")
        if not record["rows"] or not all(isinstance(row, dict) for row in record["rows"]):
            raise ValueError(f"{path}: rows must be a non-empty list of objects")
        records[path.stem] = record
    return dict(sorted(records.items(), key=lambda item: item[1]["date"], reverse=True))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|")


def _machine(machine: dict[str, Any]) -> str:
    cpu = machine.get("cpu", "?")
    cores = machine.get("cores")
    text = f"{cpu} ({cores} cores)" if cores else str(cpu)
    versions = [f"{name} {machine[name]}" for name in ("python", "onnxruntime", "openvino")
                if machine.get(name)]  # fmt: skip
    return text + (f"; {', '.join(versions)}" if versions else "")


def render(record: dict[str, Any]) -> str:
    """One record as a heading, its provenance and a Markdown table."""
    columns = list(record["rows"][0])
    lines = [
        f"### {record['title']}",
        "",
        f"**{record['date']}** · CPU: {_machine(record['machine'])} · load {record['load']}",
        "",
        f"Command: `{runnable(record['command'])}`. Source: {record['source']}",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in record["rows"]:
        lines.append("| " + " | ".join(_cell(row.get(column)) for column in columns) + " |")
    if record.get("notes"):
        lines += ["", str(record["notes"])]
    return "\n".join(lines) + "\n"


def expand(markdown: str, records: dict[str, dict[str, Any]]) -> str:
    """Replaces each marker with its records' tables; an unknown name raises."""

    def tables(match: re.Match[str]) -> str:
        names = (match.group("names") or "").split() or list(records)
        unknown = [name for name in names if name not in records]
        if unknown:
            raise KeyError(f"no benchmark record {', '.join(unknown)} in docs/benchmarks/data")
        return "\n".join(render(records[name]) for name in names)

    return MARKER.sub(tables, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "benchmark-tables" not in markdown:
        return markdown
    return expand(markdown, load_records(Path(config["docs_dir"]) / "benchmarks" / "data"))
