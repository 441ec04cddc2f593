"""A ReaderJob on a real Ray (the session's head): a caller's callable class in the actors,
any number of rows per path, the batches coming out one by one as they complete (streamed
into the ray layer's writers, never gathered). Stopping (``JobControl``) and the watchdog
are :meth:`ClassificationJob.run`'s own code (test_job, test_control, test_watchdog);
copyless-batch --task ocr under SIGINT is in tests/apps/test_batch_signals.py."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

from copyless.ray import (  # noqa: E402
    JobSettings,
    PartitionedWriter,
    ReaderJob,
    ResultWriter,
    result_table,
)

# The reader runs in Ray's worker processes, which cannot import this test module.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = pa.schema([("path", pa.string()), ("n", pa.int32()), ("text", pa.string()),
                    ("error", pa.string())])  # fmt: skip


class Repeat:
    """``path`` -> as many rows as the number in its name (none for 0)."""

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        rows: dict[str, list[Any]] = {"path": [], "n": [], "text": [], "error": []}
        for path in batch["path"]:
            count = int(str(path).rsplit("-", 1)[1])
            for i in range(count):
                for key, value in zip(rows, (path, i, f"{path}{self.suffix}", None), strict=True):
                    rows[key].append(value)
        columns = {key: np.array(values, object) for key, values in rows.items()}
        return {**columns, "n": np.array(rows["n"], np.int32)}


PATHS = [f"/p-{i % 4}" for i in range(12)]


def _job(**settings: Any) -> ReaderJob:
    return ReaderJob(PATHS, Repeat, {"suffix": "!"}, JobSettings(batch_size=2, **settings))


def test_rows_stream_into_the_writer_batch_by_batch(ray_driver, tmp_path) -> None:
    out = tmp_path / "rows.parquet"
    sizes = []
    with ResultWriter(out, schema=SCHEMA) as writer:
        for batch in _job().run():
            sizes.append(writer.write(batch))
    assert len(sizes) == len(PATHS) // 2  # one result batch per batch of paths: streamed
    rows = pq.read_table(out).to_pylist()
    assert sum(sizes) == len(rows) == writer.rows == sum(i % 4 for i in range(12))
    assert writer.errors == 0 and pq.read_schema(out) == SCHEMA
    assert sorted((r["path"], r["n"]) for r in rows) == sorted(
        (p, i) for p in PATHS for i in range(int(p[-1]))
    )
    assert {r["text"] for r in rows} == {f"{p}!" for p in PATHS if not p.endswith("0")}


def test_partitioned_writer_skips_batches_without_rows(ray_driver, tmp_path) -> None:
    job = ReaderJob(["/a-0", "/b-0", "/c-2"], Repeat, {}, JobSettings(batch_size=2))
    writer = PartitionedWriter(tmp_path / "parts", schema=SCHEMA)
    for batch in job.run():
        writer.write(batch)
    assert writer.rows == 2 and writer.parts == 1
    assert len(list((tmp_path / "parts").glob("part-*.parquet"))) == 1


def test_result_table_with_a_schema_keeps_only_strings_in_string_columns() -> None:
    batch = {"path": np.array(["/x"], object), "n": np.array([1], np.int32),
             "text": np.array([float("nan")], object), "error": np.array([None], object),
             "extra": np.array([5])}  # fmt: skip
    table = result_table(batch, schema=SCHEMA)
    assert table.schema == SCHEMA
    assert table.to_pylist() == [{"path": "/x", "n": 1, "text": None, "error": None}]
    with pytest.raises(ValueError, match="no column"):
        result_table({"path": batch["path"]}, schema=SCHEMA)
