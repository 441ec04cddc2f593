"""The recogniser's jobs for a page's lines (copyless.ocr._groups)."""

from __future__ import annotations

import numpy as np
import pytest

from copyless.ocr._groups import REC_BATCH, REC_BATCHES, WIDTHS, batch_for, rec_jobs, width_for

#: crop widths of the lines of large drawn pages (benchmarks/ocr.py's, 6-12 lines each)
PAGES = [
    [742, 392, 627, 459, 473, 486],
    [1036, 438, 504, 524, 573, 667, 708, 719, 1045],
    [213, 263, 367, 524, 547, 572, 587, 621, 796, 822, 840, 853],
    [258, 316, 376, 380, 401, 551, 627, 745, 752, 776, 810, 906],
    [2500],  # longer than the widest compiled width: squeezed into it
]


def _chunks_of_six(widths: list[int]) -> int:
    """The columns RapidOCR's cut (sorted, chunks of six at the chunk's widest) pays."""
    ordered = sorted(widths)
    chunks = [ordered[i : i + REC_BATCH] for i in range(0, len(ordered), REC_BATCH)]
    return sum(batch_for(len(c)) * width_for(max(c)) for c in chunks)


@pytest.mark.parametrize("widths", PAGES)
def test_every_line_once_in_a_shape_that_holds_it(widths: list[int]) -> None:
    jobs = rec_jobs(widths)
    rows = [i for job in jobs for i in job.rows if i >= 0]
    assert sorted(rows) == list(range(len(widths)))
    for job in jobs:
        assert job.batch in REC_BATCHES and job.width in WIDTHS
        assert len(job.rows) == job.batch
        lines = [i for i in job.rows if i >= 0]
        assert lines and all(min(widths[i], WIDTHS[-1]) <= job.width for i in lines)


@pytest.mark.parametrize("widths", PAGES)
def test_no_more_columns_than_chunks_of_six(widths: list[int]) -> None:
    columns = sum(job.batch * job.width for job in rec_jobs(widths))
    assert columns <= _chunks_of_six(widths)


def test_fewer_columns_on_large_pages() -> None:
    ours = sum(job.batch * job.width for w in PAGES for job in rec_jobs(w))
    theirs = sum(_chunks_of_six(w) for w in PAGES)
    assert ours < 0.9 * theirs


def test_no_lines_no_jobs() -> None:
    assert rec_jobs(np.zeros(0)) == []
