"""Manifest inputs: a Parquet or CSV column of paths and ``file://`` URIs read by Ray's
workers (nothing listed on the driver), null rows as error rows, missing columns and
unreadable manifests refused in one line; partitioned output whose parts are named by their
input paths, so that a job run again replaces its parts instead of adding rows."""

from __future__ import annotations

import collections
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

pytest.importorskip("ray")

from copyless.model import zoo
from copyless.ray import (
    ClassificationJob,
    JobSettings,
    Manifest,
    ManifestError,
    PartitionedWriter,
    part_name,
)


def _manifest_rows(expected: dict[str, frozenset[int]]) -> list[str | None]:
    """Half the photos as plain paths, half as file:// URIs, and one null row."""
    rows: list[str | None] = []
    for i, path in enumerate(sorted(expected)):
        rows.append(Path(path).as_uri() if i % 2 else path)
    return [*rows[:3], None, *rows[3:]]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_manifest_is_read_by_the_workers_and_every_row_comes_out(
    ray_driver, photo_folder, batch_model, tmp_path, fmt
) -> None:
    _, expected = photo_folder
    rows = _manifest_rows(expected)
    table = pa.table({"id": list(range(len(rows))), "image": pa.array(rows, pa.string())})
    uri = str(tmp_path / f"manifest.{fmt}")
    if fmt == "parquet":
        pq.write_table(table, uri, row_group_size=4)  # several blocks
    else:
        pcsv.write_csv(table, uri)
    manifest = Manifest(uri, column="image")
    assert manifest.format == fmt and manifest.check().names == ["id", "image"]
    out = tmp_path / "parts"
    settings = JobSettings(actors=1, batch_size=4, top_k=2)
    with PartitionedWriter(out, zoo.labels()) as writer:
        for batch in ClassificationJob(manifest, batch_model, settings).run():
            writer.write(batch)
    result = pq.read_table(out).to_pylist()
    # CSV reads an empty field as an empty string, Parquet keeps the null.
    assert collections.Counter(r["path"] or None for r in result) == collections.Counter(rows)
    for row in result:
        if not row["path"]:
            assert row["error"] == "no path (an empty row of the manifest)"
            continue
        local = row["path"].removeprefix("file://")
        assert row["error"] is None and row["class_id"] in expected[local], row
    assert writer.rows == len(rows) and writer.errors == 1
    assert len(list(out.glob("part-*.parquet"))) == writer.parts


def test_bad_manifests_are_one_line_errors(tmp_path) -> None:
    uri = tmp_path / "m.parquet"
    pq.write_table(pa.table({"file": ["a.jpg"]}), uri)
    with pytest.raises(ManifestError) as info:
        Manifest(str(uri)).check()
    assert str(info.value) == (
        f"{uri}: no column 'path' (columns: file); name the column of paths with --path-column"
    )
    pq.write_table(pa.table({"path": [1, 2]}), uri)
    with pytest.raises(ManifestError, match=r"column 'path' holds int64, not paths"):
        Manifest(str(uri)).check()
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(ManifestError, match=r"broken\.parquet: not a readable parquet manifest"):
        Manifest(str(broken)).check()
    with pytest.raises(ManifestError, match=r"missing\.csv: no such manifest"):
        Manifest(str(tmp_path / "missing.csv")).check()
    with pytest.raises(ManifestError, match=r"a manifest is a \.parquet or \.csv file"):
        Manifest(str(tmp_path / "list.txt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError, match=r"no \.csv file in the directory"):
        Manifest(str(tmp_path / "empty"), format="csv").check()


def test_parts_are_named_by_their_paths_and_rewriting_replaces_them(tmp_path) -> None:
    import numpy as np

    def batch(paths: list[str]) -> dict[str, np.ndarray]:
        n = len(paths)
        return {
            "path": np.array(paths, dtype=object),
            "error": np.array([""] * n, dtype=object),
            "top_class_ids": np.zeros((n, 1), np.int64),
            "top_scores": np.ones((n, 1), np.float32),
        }

    assert part_name(["b", "a"]) == part_name(["a", "b"]) != part_name(["a"])
    writer = PartitionedWriter(tmp_path / "out")
    writer.write(batch(["a.jpg", "b.jpg"]))
    writer.write(batch(["c.jpg"]))
    writer.write(batch(["b.jpg", "a.jpg"]))  # the first batch again (a retry, a rerun)
    assert (writer.rows, writer.parts) == (3, 2)
    again = PartitionedWriter(tmp_path / "out")
    again.write(batch(["c.jpg"]))
    paths = pq.read_table(tmp_path / "out").column("path").to_pylist()
    assert sorted(paths) == ["a.jpg", "b.jpg", "c.jpg"]  # no row twice
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        [part_name(["a.jpg", "b.jpg"]), part_name(["c.jpg"])]
    )  # no temporary left
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError):
        PartitionedWriter(blocker / "out")
