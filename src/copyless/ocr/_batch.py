"""OCR over many images in Ray Data (or any batch mapper): one row per text line.

:class:`OcrBatchReader` is a callable class for ``Dataset.map_batches`` (each actor opens
one :class:`OcrPipeline`, its models compiled once per shape and cached on disk), taking a
batch with a ``path`` column and returning :data:`LINE_COLUMNS`: one row per line, an image
without text gives no row, an unreadable image one row with its ``error`` (line -1).
Nothing here imports Ray: the class is plain Python, so it also runs without a cluster.
``copyless-batch --task ocr`` runs it as a :class:`copyless.ray.ReaderJob` (the ray layer's
driver, watchdog and writer), its rows typed by :func:`line_schema`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..types import CopylessError, RunnerType
from ..vision import ReadLimit
from ._pipeline import OcrPipeline
from ._results import OcrResult

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["LINE_COLUMNS", "OcrBatchReader", "line_schema"]

#: the columns of :class:`OcrBatchReader`'s output (and of ``copyless-batch --task ocr``)
LINE_COLUMNS = ("path", "line", "x0", "y0", "x1", "y1", "score", "text", "error")


def line_schema() -> pa.Schema:
    """The Parquet schema of :data:`LINE_COLUMNS` (``path``, ``text``, ``error`` strings,
    ``score`` float32, the rest int32). Needs pyarrow (the ray extra)."""
    import pyarrow as pa

    types = {"path": pa.string(), "score": pa.float32(), "text": pa.string(),
             "error": pa.string()}  # fmt: skip
    return pa.schema([(name, types.get(name, pa.int32())) for name in LINE_COLUMNS])


class OcrBatchReader:
    """``reader({"path": [...]})`` -> a dict of :data:`LINE_COLUMNS` numpy columns.
    ``max_image_bytes``: the memory one decoded page may take (a larger one is an error
    row, read from its header; None: no bound)."""

    def __init__(
        self,
        generation: str | None = None,
        runner_type: RunnerType = RunnerType.ONNXRUNTIME,
        options: Mapping[str, Any] | None = None,
        max_image_bytes: int | None = None,
    ) -> None:
        limit = None
        if max_image_bytes is not None:
            limit = ReadLimit(max_image_bytes, "the job gives one image")
        self._ocr = OcrPipeline(generation, runner_type=runner_type, options=options,
                                read_limit=limit)  # fmt: skip

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
