"""ResultWriter: Parquet rows with labels and top-k lists, nulls for failed images, and an
atomic destination: nothing until commit, the old file kept on abort or an exception."""

from __future__ import annotations

import gc

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("ray")

from copyless.ray import SCHEMA, ResultWriter


def _batch(paths: list[str], errors: list[str]) -> dict[str, np.ndarray]:
    n = len(paths)
    ids = np.array([[i, i + 1] for i in range(n)], np.int64)
    scores = np.array([[0.75, 0.25]] * n, np.float32)
    return {
        "path": np.array(paths, dtype=object),
        "error": np.array(errors, dtype=object),
        "class_id": ids[:, 0],
        "score": scores[:, 0],
        "top_class_ids": ids,
        "top_scores": scores,
    }


def test_rows_labels_and_nulls(tmp_path) -> None:
    out = tmp_path / "sub" / "out.parquet"
    with ResultWriter(out, ["zero", "one", "two"]) as writer:
        assert writer.write(_batch(["a.jpg", "b.jpg"], ["", "b.jpg: broken"])) == 2
        writer.write(_batch(["c.jpg", "d.jpg", "e.jpg"], ["", "", ""]))
        assert not out.exists()  # nothing under the final name until commit
    table = pq.read_table(out)
    assert table.schema == SCHEMA
    rows = table.to_pylist()
    assert [r["path"] for r in rows] == ["a.jpg", "b.jpg", "c.jpg", "d.jpg", "e.jpg"]
    assert rows[0] == {
        "path": "a.jpg", "class_id": 0, "label": "zero", "score": 0.75,
        "top_class_ids": [0, 1], "top_labels": ["zero", "one"], "top_scores": [0.75, 0.25],
        "error": None,
    }  # fmt: skip
    assert rows[1]["error"] == "b.jpg: broken"
    assert all(rows[1][k] is None for k in ("class_id", "label", "score", "top_class_ids"))
    assert rows[4]["top_labels"] == ["two", "class 3"]  # beyond the label list
    assert writer.rows == 5 and writer.errors == 1
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.parquet"]


def test_an_interrupted_run_leaves_the_old_file_and_no_temporary(tmp_path) -> None:
    out = tmp_path / "out.parquet"
    out.write_bytes(b"previous results")
    with pytest.raises(KeyboardInterrupt), ResultWriter(out) as writer:
        writer.write(_batch(["a.jpg"], [""]))
        raise KeyboardInterrupt
    assert out.read_bytes() == b"previous results"
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]
    writer.abort()  # idempotent
    with pytest.raises(ValueError, match="already committed or aborted"):
        writer.commit()


def test_a_dropped_writer_removes_its_temporary_file(tmp_path) -> None:
    writer = ResultWriter(tmp_path / "out.parquet")
    writer.write(_batch(["a.jpg"], [""]))
    assert len(list(tmp_path.iterdir())) == 1
    del writer
    gc.collect()
    assert list(tmp_path.iterdir()) == []
