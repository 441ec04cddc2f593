"""copyless-batch --task ocr: OcrBatchReader actors as a job of the ray layer (a ReaderJob),
the lines written by the ray layer's writers: the same lines OcrPipeline.read gives for each
page, one Parquet file or one part per batch, and the usage it refuses."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from ray_helpers import RAY_ENV, batch_command

pytest.importorskip("ray")

from copyless.apps import batch
from copyless.ocr import OcrPipeline, draw_page, line_schema

CLOSING = re.compile(
    r"^(\d+) images(?: \((\d+) unreadable\))?, (\d+) lines in \d+\.\d\d s "
    r"\((\d+) actor\(s\) on (local Ray|cluster \S+)\) -> (\S+)$"
)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three drawn pages, a blank one (no line) and a file that is no image."""
    folder = tmp_path_factory.mktemp("pages")
    for seed in range(3):
        page = draw_page(seed, size=(620, 500), lines=4)
        Image.fromarray(page.image).save(folder / f"p{seed}.png")
    Image.fromarray(np.full((50, 80, 3), 255, np.uint8)).save(folder / "blank.png")
    (folder / "broken.png").write_bytes(b"no image")
    return folder


@pytest.fixture(scope="module")
def read(pages: Path) -> dict[str, list[tuple[int, int, int, int, int, str, float]]]:
    """Each readable page's lines as OcrPipeline.read gives them: (line, box, text, score)."""
    found = {}
    with OcrPipeline() as ocr:
        for path in sorted(pages.glob("*.png")):
            if path.name != "broken.png":
                lines = enumerate(ocr.read(path).lines)
                found[str(path)] = [(i, *line.box, line.text, line.score) for i, line in lines]
    return found


def _rows_by_page(rows: list[dict]) -> dict[str, list[tuple]]:
    pages: dict[str, list[tuple]] = {}
    for r in sorted(rows, key=lambda r: (r["path"], r["line"])):
        if r["error"] is None:
            pages.setdefault(r["path"], []).append(
                (r["line"], r["x0"], r["y0"], r["x1"], r["y1"], r["text"], r["score"]))
    return pages


def _check_lines(rows: list[dict], read: dict[str, list[tuple]], pages: Path) -> None:
    got = _rows_by_page(rows)
    assert set(got) == {p for p, lines in read.items() if lines}  # the blank page: no row
    for path, lines in got.items():
        assert [line[:-1] for line in lines] == [line[:-1] for line in read[path]], path
        assert np.allclose([line[-1] for line in lines], [line[-1] for line in read[path]],
                           atol=1e-4)  # fmt: skip
    errors = [r for r in rows if r["error"] is not None]
    assert [(r["path"], r["line"]) for r in errors] == [(str(pages / "broken.png"), -1)]
    assert errors[0]["error"].startswith(f"{pages / 'broken.png'}: ")


def test_ocr_writes_the_lines_ocr_pipeline_reads(ray_head, pages, read, tmp_path) -> None:
    out = tmp_path / "lines.parquet"
    result = subprocess.run(
        [*batch_command(), str(pages), "-o", str(out), "--task", "ocr", "--batch-size", "2",
         "--address", ray_head.address, "--json"],
        capture_output=True, text=True, env={**os.environ, **RAY_ENV}, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = pq.read_table(out).to_pylist()
    assert pq.read_schema(out) == line_schema()
    _check_lines(rows, read, pages)
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r.pop("type") for r in records] == ["line"] * len(rows) + ["summary"]
    assert sorted(records[:-1], key=str) == sorted(rows, key=str)  # streamed as written
    summary = records[-1]
    summary.pop("timings", None)
    assert summary == {"images": 5, "lines": len(rows), "unreadable": 1, "output": str(out)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lines.parquet"]


def test_ocr_into_a_directory_writes_a_whole_part_per_batch(ray_head, pages, read, tmp_path):
    out = tmp_path / "parts"
    result = subprocess.run(
        [*batch_command(), str(pages), "-o", f"{out}/", "--task", "ocr", "--batch-size", "1",
         "--address", ray_head.address],
        capture_output=True, text=True, env={**os.environ, **RAY_ENV}, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) == 4  # one per page with a row: the blank page writes none
    rows = [row for part in parts for row in pq.read_table(part).to_pylist()]
    _check_lines(rows, read, pages)
    match = CLOSING.match(result.stdout.strip())
    assert match, result.stdout
    assert match.groups()[:4] == ("5", "1", str(len(rows)), "1")
    assert match.group(5).startswith("cluster ") and match.group(6) == f"{out}/"


@pytest.mark.parametrize("argv", [["--manifest", "m.csv", "-o", "o.parquet"], []],
                         ids=["manifest", "no-output"])  # fmt: skip
def test_ocr_usage(pages, argv, capsys) -> None:
    inputs = [] if argv and argv[0] == "--manifest" else [str(pages)]
    assert batch.main([*inputs, *argv, "--task", "ocr"]) == 2
    assert capsys.readouterr().err == (
        "error: --task ocr takes INPUTs and -o OUT.parquet or DIR/\n"
    )
