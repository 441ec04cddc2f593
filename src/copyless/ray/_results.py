"""Result rows to Parquet, atomically: an interrupted run leaves no half-written file.

:class:`ResultWriter`, one file: rows stream into a hidden temporary file beside the
destination (constant memory however many images); :meth:`ResultWriter.commit` fsyncs it
and renames it over the destination in one step. Leaving the ``with`` block on an exception
(Ctrl-C included) deletes it instead.

:class:`PartitionedWriter`, a directory: one Parquet file per result batch, each written
to a temporary name and renamed, named by a hash of the batch's input paths. A batch
written again (Ray Data retrying it, or the same job run again into the directory) replaces
its file instead of adding rows, and every file there is whole: what a failed run had
finished stays.

Schema (:func:`schema_for`), one row per image; a detector's and a segmenter's rows are
:data:`TASK_SCHEMAS`' (boxes as lists of ``[x0, y0, x1, y1]``; a mask's classes and their
fractions). A classifier's: ``path`` (string), ``class_id`` (int64), ``label`` (string),
``score`` (float32, the top-1 probability), ``top_class_ids`` / ``top_labels`` /
``top_scores`` (lists, best first) and ``error`` (string). For an image that could not be
read or decoded every prediction column is null and ``error`` says why; otherwise
``error`` is null.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from ..types import AtomicFile

SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("class_id", pa.int64()),
        ("label", pa.string()),
        ("score", pa.float32()),
        ("top_class_ids", pa.list_(pa.int64())),
        ("top_labels", pa.list_(pa.string())),
        ("top_scores", pa.list_(pa.float32())),
        ("error", pa.string()),
    ]
)


#: The rows of a detector (one a image: its boxes in the image's pixels) and a segmenter
#: (the classes of its mask, most pixels first, with their share of the pixels).
TASK_SCHEMAS = {
    "detect": pa.schema([
        ("path", pa.string()),
        ("boxes", pa.list_(pa.list_(pa.float32(), 4))),
        ("scores", pa.list_(pa.float32())),
        ("class_ids", pa.list_(pa.int64())),
        ("labels", pa.list_(pa.string())),
        ("error", pa.string()),
    ]),
    "segment": pa.schema([
        ("path", pa.string()),
        ("class_ids", pa.list_(pa.int64())),
        ("labels", pa.list_(pa.string())),
        ("fractions", pa.list_(pa.float32())),
        ("error", pa.string()),
    ]),
}  # fmt: skip


def schema_for(task: str | None, schema: pa.Schema | None = None) -> pa.Schema:
    """The Parquet schema of a job's rows: ``schema`` where given (a
    :class:`~copyless.ray.ReaderJob`'s rows), else :data:`SCHEMA` (classify) or the task's."""
    if schema is not None:
        return schema
    return SCHEMA if task is None else TASK_SCHEMAS[task]


class ResultWriter:
    """Writes the result batches of :meth:`copyless.ray.ClassificationJob.run` to ``path``.

    ``labels[class_id]`` names a class; ids beyond the list are named ``"class N"``.
    ``schema``: the rows of a :class:`~copyless.ray.ReaderJob` instead (its batches' columns
    as the schema says; see :func:`result_table`). ``rows`` and ``errors`` count what was
    written (rows with an ``error``).
    """

    def __init__(self, path: str | os.PathLike[str], labels: Sequence[str] = (),
                 task: str | None = None, *, schema: pa.Schema | None = None) -> None:  # fmt: skip
        self._path = Path(path)
        self._labels = list(labels)
        self._task = task
        self._schema = schema
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._out = AtomicFile(self._path)
        try:
            self._writer = pq.ParquetWriter(self._out.file, schema_for(task, schema))
        except BaseException:
            self._out.discard()
            raise
        # A writer dropped without commit() or abort() removes its temporary file.
        self._finalizer = weakref.finalize(self, _discard, self._writer, self._out)
        self._done = False
        self.rows = 0
        self.errors = 0

    def write(self, batch: dict[str, npt.NDArray[Any]]) -> int:
        """Append one result batch; returns its number of rows."""
        table = self.table(batch)
        self._writer.write_table(table)
        self.rows += table.num_rows
        self.errors += table.num_rows - table.column("error").null_count
        return int(table.num_rows)

    def table(self, batch: dict[str, npt.NDArray[Any]]) -> pa.Table:
        """The Parquet rows of one result batch."""
        return result_table(batch, self._labels, self._task, schema=self._schema)

    def commit(self) -> Path:
        """Finish the file and move it over the destination; returns the destination."""
        if self._done:
            raise ValueError(f"{self._path}: already committed or aborted")
        self._done = True
        self._finalizer.detach()
        try:
            self._writer.close()
        except BaseException:
            self._remove()
            raise
        return self._out.commit()

    def abort(self) -> None:
        """Drop what was written; the destination is left as it was."""
        if self._done:
            return
        self._done = True
        self._finalizer.detach()
        self._remove()

    def _remove(self) -> None:
        _discard(self._writer, self._out)

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._done:
            self.commit()


def _discard(writer: pq.ParquetWriter, out: AtomicFile) -> None:
    with contextlib.suppress(Exception):  # closing a writer whose file failed may raise
        writer.close()
    out.discard()


def result_table(batch: dict[str, npt.NDArray[Any]], labels: Sequence[str] = (),
                 task: str | None = None, *, schema: pa.Schema | None = None
                 ) -> pa.Table:  # fmt: skip
    """The Parquet rows (:func:`schema_for` ``task``) of one result batch;
    ``labels[class_id]`` names a class, ids beyond the list are named ``"class N"``.
    With ``schema`` (a :class:`~copyless.ray.ReaderJob`'s rows): the batch's columns of
    those names, as those types (a string column keeps only strings: Ray Data hands a column
    of None back as NaN)."""
    if schema is not None:
        return _rows_table(batch, schema)

    def name(class_id: int) -> str:
        return labels[class_id] if 0 <= class_id < len(labels) else f"class {class_id}"

    if task is not None:
        return _task_table(batch, task, name)

    failed = [bool(e) for e in batch["error"]]
    ids = batch["top_class_ids"].tolist()
    scores = batch["top_scores"].tolist()
    top_ids = [None if bad else row for bad, row in zip(failed, ids, strict=True)]
    columns = {
        "path": [None if p is None else str(p) for p in batch["path"]],
        "class_id": [None if bad else row[0] for bad, row in zip(failed, ids, strict=True)],
        "label": [None if row is None else name(row[0]) for row in top_ids],
        "score": [None if bad else row[0] for bad, row in zip(failed, scores, strict=True)],
        "top_class_ids": top_ids,
        "top_labels": [None if row is None else list(map(name, row)) for row in top_ids],
        "top_scores": [None if bad else row for bad, row in zip(failed, scores, strict=True)],
        "error": [str(e) if bad else None for bad, e in zip(failed, batch["error"], strict=True)],
    }
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def _task_table(batch: dict[str, npt.NDArray[Any]], task: str, name: Any) -> pa.Table:
    """A detector's or segmenter's rows (a failed image: null lists, its error)."""
    failed = [bool(e) for e in batch["error"]]
    ids = [None if bad else _plain(row) for bad, row in
           zip(failed, batch["class_ids"], strict=True)]  # fmt: skip
    columns: dict[str, Any] = {
        "path": [None if p is None else str(p) for p in batch["path"]],
        "class_ids": ids,
        "labels": [None if row is None else [name(int(i)) for i in row] for row in ids],
        "error": [str(e) if bad else None for bad, e in zip(failed, batch["error"], strict=True)],
    }
    keys = ("boxes", "scores") if task == "detect" else ("fractions",)
    for key in keys:
        columns[key] = [None if bad else _plain(row) for bad, row in
                        zip(failed, batch[key], strict=True)]  # fmt: skip
    return pa.Table.from_pydict(columns, schema=TASK_SCHEMAS[task])


def _rows_table(batch: dict[str, npt.NDArray[Any]], schema: pa.Schema) -> pa.Table:
    missing = [name for name in schema.names if name not in batch]
    if missing:
        raise ValueError(f"the batch has no column(s) {missing} (it has {list(batch)})")
    columns: dict[str, Any] = {}
    for field in schema:
        values: Any = batch[field.name]
        if pa.types.is_string(field.type):
            values = [v if isinstance(v, str) else None for v in values]
        columns[field.name] = values
    return pa.Table.from_pydict(columns, schema=schema)


def _plain(row: Any) -> list[Any]:
    """A row's list as plain Python (Ray Data hands lists back as numpy arrays, boxes as
    arrays of arrays; an image with no boxes as None or an empty array)."""
    if row is None:
        return []
    return [_plain(item) if isinstance(item, (list, tuple, np.ndarray)) else item.item()
            if isinstance(item, np.generic) else item for item in row]  # fmt: skip


class PartitionedWriter:
    """Writes result batches to ``directory``, one ``part-HASH.parquet`` per batch (see
    the module docstring); ``rows``, ``errors`` and ``parts`` count what was written;
    ``labels``, ``task`` and ``schema`` as :class:`ResultWriter`'s.

    Has :class:`ResultWriter`'s interface: :meth:`commit` returns the directory and
    :meth:`abort` keeps the parts already written (each is whole). Copies: none beyond
    building each batch's Arrow table.
    """

    def __init__(self, directory: str | os.PathLike[str], labels: Sequence[str] = (),
                 task: str | None = None, *, schema: pa.Schema | None = None) -> None:  # fmt: skip
        self._directory = Path(directory)
        self._labels = list(labels)
        self._task = task
        self._schema = schema
        self._directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=self._directory, prefix=".probe-"):
            pass  # the directory is writable: fail before any Ray starts otherwise
        self._names: set[str] = set()
        self.rows = 0
        self.errors = 0

    @property
    def parts(self) -> int:
        """The part files this writer has written."""
        return len(self._names)

    def write(self, batch: dict[str, npt.NDArray[Any]]) -> int:
        """Write one result batch as its own part file; returns its number of rows (a
        batch of none, a reader's pages without text, writes no file)."""
        table = result_table(batch, self._labels, self._task, schema=self._schema)
        if table.num_rows == 0:
            return 0
        name = part_name(table.column("path").to_pylist())
        with AtomicFile(self._directory / name) as out:
            pq.write_table(table, out.file)
        if name not in self._names:  # a batch written again replaced its file
            self._names.add(name)
            self.rows += table.num_rows
            self.errors += table.num_rows - table.column("error").null_count
        return int(table.num_rows)

    def commit(self) -> Path:
        """The parts are already in place; returns the directory."""
        return self._directory

    def abort(self) -> None:
        """Keep the parts written so far: each is whole."""

    def __enter__(self) -> PartitionedWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def part_name(paths: Sequence[str | None]) -> str:
    """``part-HASH.parquet``: the same input paths (in any order) give the same name."""
    digest = hashlib.sha256()
    for path in sorted(p or "" for p in paths):
        digest.update(path.encode("utf-8", "surrogateescape") + b"\0")
    return f"part-{digest.hexdigest()[:24]}.parquet"
