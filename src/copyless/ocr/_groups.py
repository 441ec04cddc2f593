"""The recogniser's jobs for a page's lines: which lines run together, at which shape.

The recogniser is compiled per (batch, width) shape, so a job pads each line to its
shape's width and idle rows to its batch; its cost is close to ``batch x width``
(measured on onnxruntime's CPU provider: 75-95 us of CPU per input column at every batch
from 1 to 6 and width from 320 to 1920, one line's fixed cost no more than a few columns).
Cutting the lines sorted by width into chunks of :data:`REC_BATCH`, as RapidOCR does, pads
a whole chunk to its widest line's bucket: on large pages with lines of every length that
paid about a third more columns than needed. :func:`rec_jobs` instead cuts the sorted lines
where the padded columns are fewest (a dynamic programme over the cut points: groups of 1
to :data:`REC_BATCH` lines, each run at the smallest compiled batch and width that hold it),
which on pages of 6-12 lines took 19% fewer columns than the chunks of six.

The text does not change: each row is recognised on its own (the model's rows do not mix),
and a wider pad is blank columns the CTC decoding reads as blanks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["REC_BATCH", "REC_BATCHES", "WIDTHS", "RecJob", "rec_jobs"]

#: recogniser input widths (RapidOCR pads a batch to max(320, 48 x its widest ratio))
WIDTHS = (320, 480, 640, 960, 1280, 1920)
REC_BATCH = 6
#: batch sizes the recogniser is compiled at: a group of n lines runs at the smallest >= n
REC_BATCHES = (1, 2, 3, REC_BATCH)
#: a job's fixed cost, in input columns (the runner's call, the rows' prepare and finish)
JOB_COLUMNS = 32


@dataclass(frozen=True, slots=True)
class RecJob:
    """One recogniser job: its compiled ``batch`` and ``width`` and the lines of its rows
    (``rows``: line indices, ``-1`` for an idle row)."""

    batch: int
    width: int
    rows: tuple[int, ...]


def width_for(widest: int) -> int:
    """The narrowest compiled width that holds a line ``widest`` columns wide (the widest
    compiled one for longer lines, which are squeezed into it)."""
    return WIDTHS[min(int(np.searchsorted(WIDTHS, widest)), len(WIDTHS) - 1)]


def batch_for(lines: int) -> int:
    """The smallest compiled batch that holds ``lines`` rows."""
    return next(size for size in REC_BATCHES if size >= lines)


def rec_jobs(widths: npt.ArrayLike) -> list[RecJob]:
    """The jobs for lines of crop ``widths`` (at the recogniser's height): the lines sorted
    by width (stable), cut into consecutive groups at the least padded cost (see the module
    docstring)."""
    crop = np.asarray(widths, dtype=np.int64)
    order = np.argsort(crop, kind="stable")
    sorted_widths = crop[order]
    n = len(order)
    cost = [0] + [0] * n
    cut = [0] * (n + 1)  # cut[j]: where the group ending at line j starts
    for j in range(1, n + 1):
        width = width_for(int(sorted_widths[j - 1]))  # the group's widest line is its last
        best = -1
        for i in range(max(0, j - REC_BATCH), j):
            total = cost[i] + batch_for(j - i) * width + JOB_COLUMNS
            if best < 0 or total < best:
                best, cut[j] = total, i
        cost[j] = best
    jobs = []
    j = n
    while j > 0:
        i = cut[j]
        lines = tuple(int(k) for k in order[i:j])
        batch = batch_for(len(lines))
        jobs.append(
            RecJob(
                batch, width_for(int(sorted_widths[j - 1])), lines + (-1,) * (batch - len(lines))
            )
        )
        j = i
    return jobs[::-1]
