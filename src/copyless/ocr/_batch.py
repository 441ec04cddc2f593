"""OCR over many images in Ray Data (or any batch mapper): one row per text line.

:class:`OcrBatchReader` is a callable class for ``Dataset.map_batches`` (each actor opens
one :class:`OcrPipeline`, its models compiled once per shape and cached on disk), taking a
batch with a ``path`` column and returning :data:`LINE_COLUMNS`: one row per line, an image
without text gives no row, an unreadable image one row with its ``error`` (line -1).
Nothing here imports Ray: the class is plain Python, so it also runs without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..types import CopylessError, RunnerType
from ._pipeline import OcrPipeline
from ._results import OcrResult

__all__ = ["LINE_COLUMNS", "OcrBatchReader"]

#: the columns of :class:`OcrBatchReader`'s output (and of ``copyless-batch --task ocr``)
LINE_COLUMNS = ("path", "line", "x0", "y0", "x1", "y1", "score", "text", "error")


class OcrBatchReader:
    """``reader({"path": [...]})`` -> a dict of :data:`LINE_COLUMNS` numpy columns."""

    def __init__(
        self,
        generation: str | None = None,
        runner_type: RunnerType = RunnerType.ONNXRUNTIME,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self._ocr = OcrPipeline(generation, runner_type=runner_type, options=options)

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        rows: dict[str, list[Any]] = {name: [] for name in LINE_COLUMNS}
        paths = [str(p) for p in batch["path"]]
        for path, read in zip(paths, self._ocr.map(paths), strict=True):  # pages overlapped
            if read.error is not None:
                if not isinstance(read.error, CopylessError | ValueError | OSError):
                    raise read.error
                _append(rows, path, -1, (0, 0, 0, 0), 0.0, "", str(read.error).splitlines()[0])
                continue
            result: OcrResult = read.value
            for index, line in enumerate(result.lines):
                _append(rows, path, index, line.box, line.score, line.text, None)
        return {
            "path": np.array(rows["path"], dtype=object),
            "line": np.array(rows["line"], dtype=np.int32),
            **{k: np.array(rows[k], dtype=np.int32) for k in ("x0", "y0", "x1", "y1")},
            "score": np.array(rows["score"], dtype=np.float32),
            "text": np.array(rows["text"], dtype=object),
            "error": np.array(rows["error"], dtype=object),
        }

    def close(self) -> None:
        """Close the pipeline's runners."""
        self._ocr.close()


def _append(rows: dict[str, list[Any]], path: str, index: int, box: tuple[int, ...],
            score: float, text: str, error: str | None) -> None:  # fmt: skip
    for key, value in zip(LINE_COLUMNS, (path, index, *box, score, text, error), strict=True):
        rows[key].append(value)
