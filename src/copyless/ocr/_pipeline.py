"""OcrPipeline: PP-OCR detection, crops and recognition as chained zero-copy pipelines.

The life of a page: decode -> the detector's RGBx input written in one resize pass
(:func:`~copyless.vision.place_page`; normalisation is in the compiled graph) -> detect ->
the probability map read in place by the DB postprocess (:func:`~copyless.vision.text_quads`)
-> each line's perspective crop sampled straight from the decoded page into its row of the
recogniser's batch tensor (:func:`~copyless.vision.warp_lines`; optionally the angle
classifier's first) -> recognise, batched by width bucket -> CTC greedy decoding of the
bound output in place. No crop image, no stacked copy, no intermediate page.

The stages are :class:`copyless.Pipeline` s (their ``prepare``/``finish`` in :mod:`._stages`),
chained: a detector pipeline per input size takes the pages (``prepare`` decodes a page
and writes the detector's input, ``finish`` finds its lines), and its results feed the
recogniser's pipelines, one per (batch, width) bucket, whose jobs are the buckets' chunks
of up to :data:`REC_BATCH` lines (``prepare`` samples a line into its row, ``finish``
decodes the row's text). While a page's lines are recognised, the next page is decoded and
detected on a thread of its own, whatever its size (:mod:`._ahead`); the recogniser's jobs
cut the page's lines where the padded columns are fewest (:mod:`._groups`). A page that
cannot be read is one error result, and the others go on (:meth:`OcrPipeline.map`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..model import load_model
from ..pipeline import ItemTensors, Pipeline, Result
from ..runner import RunnerFactory
from ..types import CopylessError, JobError, RunnerType
from ..vision import ReadLimit, line_crops
from ._ahead import DetectAhead
from ._groups import REC_BATCH, WIDTHS, rec_jobs
from ._models import PIXEL_MEAN, PIXEL_STD, OcrModels, compiled
from ._orientation import LineTurns, orient_lines
from ._results import OcrLine, OcrResult, PageTimes
from ._stages import (
    Image,
    LineItem,
    PageItem,
    ReadText,
    find_lines,
    page_of,
    place,
    upside_down,
    warp,
)

__all__ = ["OcrError", "OcrPipeline"]

logger = logging.getLogger(__name__)

HEIGHT = 48
CLS_WIDTH = 192
#: detector pipelines kept open (one per page size, the latest used): a new size opens
#: its own (a session from the compiled cache, ~50 ms) and closes the oldest
DETECTORS = 2
TEXT_SCORE = 0.5
#: a recogniser job waits this long for its chunk's rows (every chunk is queued at once,
#: idle rows included, so a job is cut at its chunk's end, not by this)
_CHUNK_WAIT_MS = 1000.0


class OcrError(CopylessError):
    """A model run failed (the status is in the message), or the pipeline is closed."""


class _LineFailed(Exception):
    """A line's recognition (or classification) failed: its page fails with ``error``."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class OcrPipeline:
    """Read text lines from page images with PP-OCR models (see the module docstring).

    ``generation``: ``"v6"`` (``rapidocr`` 3.x's models) or ``"v4"`` (``rapidocr-onnxruntime``'s);
    default the newest installed. ``angle`` (on by default, as RapidOCR's ``use_cls``):
    run the angle classifier and read each line the way up it says, pages turned 90, 180 or
    270 degrees included (:mod:`._orientation`); ``angle=False`` reads every line as it
    stands (taller-than-wide ones turned 90 degrees), a little faster.
    ``read_limit``: a page whose decoding would take more memory is an error result
    (read from its header first; :class:`~copyless.vision.ReadLimit`).
    ``runner_type``/``options``: the runners' engine and options (e.g.
    ``RunnerType.OPENVINO``). Models are compiled on first use per shape and cached (see
    :mod:`._models`); runners and their pipelines are opened lazily and kept until
    :meth:`close`.

    Copies: the page is decoded once; the detector input is one resize pass from it; crops
    are sampled from it into the recogniser's tensor; outputs are read in place. Results
    (:class:`OcrResult`) hold plain Python values, nothing that aliases the tensors.
    """

    def __init__(
        self,
        generation: str | None = None,
        *,
        angle: bool = True,
        runner_type: RunnerType = RunnerType.ONNXRUNTIME,
        options: Mapping[str, Any] | None = None,
        read_limit: ReadLimit | None = None,
    ) -> None:
        self.models = OcrModels.load(generation)
        self._read_limit = read_limit
        self.angle = bool(angle)
        self._runner_type = runner_type
        # one job per runner: a job then gets every core's thread, not a share of them;
        # the pipelines' second slot prepares the next job meanwhile
        self._options = {"max_concurrent_runs": 1, **(options or {})}
        self._det: OrderedDict[tuple[int, int], Pipeline] = OrderedDict()  # latest last
        self._engines: dict[str, RunnerType] = {}  # VAIML's choice, per zoo model
        self._rec: dict[tuple[int, int], Pipeline] = {}
        self._cls: Pipeline | None = None
        self._read_text = ReadText(self.models.characters)
        self._rec_capacity: bool | None = None  # its output needs a capacity compiled in
        self._current: Pipeline | None = None
        self._stopping = threading.Event()
        self._closed = False
        self._last_done = 0.0

    # -- lifecycle ----------------------------------------------------------------------

    def stop(self) -> None:
        """Take no more pages: the pages already taken are read and come out, then
        :meth:`map` (and any later one) ends. Safe from a signal handler (what SIGINT
        calls in copyless-ocr)."""
        self._stopping.set()
        current = self._current
        if current is not None:
            current.stop()

    def close(self) -> None:
        """Close every pipeline and runner (idempotent); the pipeline cannot be used
        afterwards."""
        self._closed = True
        pipelines = [*self._det.values(), *self._rec.values(), *([self._cls] if self._cls else [])]
        for pipeline in pipelines:
            pipeline.close()
            pipeline.runner.close()
        self._det.clear()
        self._rec.clear()
        self._cls = None

    def __enter__(self) -> OcrPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ------------------------------------------------------------------------

    def read(self, image: Image) -> OcrResult:
        """The text lines of one image: a path, encoded bytes, a PIL image or a numpy array
        (RGB, greyscale or RGBA; uint8, uint16 or float 0..1), read as
        :func:`copyless.vision.decode` reads it (upright, as Pillow shows it). Raises the
        page's error (``ValueError``/``OSError`` for an unreadable file or array,
        ``TypeError`` for something that is no image, :class:`OcrError` for a failed model
        run)."""
        for result in self.map([image]):
            return _unwrap(result)
        raise OcrError("the OCR pipeline was stopped before the page was read")

    def read_all(self, images: Iterable[Image]) -> Iterator[OcrResult]:
        """The results of ``images`` in order, raising at the first page that fails."""
        for result in self.map(images):
            yield _unwrap(result)

    def map(self, images: Iterable[Image]) -> Iterator[Result]:
        """One :class:`copyless.Result` per image, in order, pulled lazily: ``value`` the
        page's :class:`OcrResult`, or ``error`` what made it fail (an unreadable file's
        ``ValueError``/``OSError``, an :class:`OcrError` for a failed run); the other pages
        go on. ``index`` is the image's position, ``timings`` its :class:`PageTimes` as a
        dict. Raises :class:`OcrError` on a closed pipeline and whatever opening a model
        raises (compiling, loading)."""
        if self._closed:
            raise OcrError("the OCR pipeline is closed")
        limit = self._read_limit
        pages = (page_of(index, image, limit) for index, image in enumerate(images))
        ahead = DetectAhead(pages, self._stopping.is_set, self._detector, self._set_current)
        for detector, found in ahead:
            if isinstance(found, PageItem) or detector is None:  # unreadable, no size known
                page = cast(PageItem, found)
                yield _failed(page, page.error or OcrError("unreadable page"))
                continue
            yield self._page_result(detector, found)

    def _set_current(self, detector: Pipeline | None) -> None:
        self._current = detector
        if detector is not None and self._stopping.is_set():
            detector.stop()

    # -- one page -----------------------------------------------------------------------

    def _page_result(self, detector: Pipeline, found: Result) -> Result:
        """The page's result once the ``detector`` found its lines: recognised here."""
        page: PageItem = found.item
        if found.error is not None or page.pixels is None:
            return _failed(page, _model_error(detector, found.error or OcrError("not decoded")))
        received = time.perf_counter()
        start = received - sum(found.timings.values())  # when the page left its source
        t = found.timings
        times = PageTimes(decode=page.decode,
                          detect=t["prepare"] - page.decode + t["infer"] + t["finish"])  # fmt: skip
        try:
            lines = self._recognise(page.pixels, found.value, times)
        except _LineFailed as failed:
            return _failed(page, failed.error)
        done = time.perf_counter()
        # overlapped pages: a page's total is the wall time since the previous page was
        # done (or since it was taken, when that is later), so totals add up to the run
        times.total = done - max(start, self._last_done)
        self._last_done = done
        result = OcrResult(tuple(lines), page.pixels.shape[:2], times)
        return Result(page.image, result, None, None, page.index, times.as_dict())

    def _recognise(
        self, pixels: npt.NDArray[np.uint8], quads: npt.NDArray[np.float64], times: PageTimes
    ) -> list[OcrLine]:
        if not len(quads):
            return []
        quarters = None
        if self.angle:
            turns = self._turns(pixels, quads, times)
            quads, quarters = quads[turns.order], turns.quarters[turns.order]
        t0 = time.perf_counter()
        crops = line_crops(quads, height=HEIGHT, max_width=WIDTHS[-1], quarters=quarters)
        chunks: dict[tuple[int, int], list[int]] = {}  # shape -> line per row (-1: idle)
        for job in rec_jobs(crops.widths):
            chunks.setdefault((job.batch, job.width), []).extend(job.rows)
        times.crops += time.perf_counter() - t0
        texts: list[tuple[str, float]] = [("", 0.0)] * len(quads)
        for (batch, width), rows in chunks.items():
            items = [_line(pixels, crops, i) for i in rows]
            values, prepare, run = _run(self._recogniser(batch, width), items, batch)
            times.crops += prepare
            times.recognise += run
            for i, value in zip(rows, values, strict=True):
                if i >= 0:
                    texts[i] = value
        return _lines(quads, texts)

    def _turns(
        self, pixels: npt.NDArray[np.uint8], quads: npt.NDArray[np.float64], times: PageTimes
    ) -> LineTurns:
        """The angle classifier's verdicts, as each line's and the page's turns and the
        reading order on the upright page (:func:`._orientation.orient_lines`)."""
        t0 = time.perf_counter()
        crops = line_crops(quads, height=HEIGHT, max_width=CLS_WIDTH)
        rows = list(range(len(quads)))
        rows += [-1] * (-len(rows) % REC_BATCH)  # whole jobs of REC_BATCH rows
        items = [_line(pixels, crops, i) for i in rows]
        times.crops += time.perf_counter() - t0
        values, prepare, run = _run(self._classifier(), items, REC_BATCH)
        times.crops += prepare + run
        return orient_lines(quads, crops.quarters, values[: len(quads)])

    # -- the pipelines ------------------------------------------------------------------

    def _pipeline(self, name: str, prepare: Callable[[Any, ItemTensors], None],
                  finish: Callable[[Any, ItemTensors], Any], batch: int = 1,
                  **compile_options: Any) -> Pipeline:  # fmt: skip
        """A pipeline on a new runner of zoo model ``name`` compiled with the options."""
        if self._closed:
            raise OcrError("the OCR pipeline is closed")
        path = compiled(name, **compile_options)
        # VAIML measures the engines per compiled model, and every input size is one: the
        # first shape's choice stands for the model's other shapes
        engine = self._engines.get(name, self._runner_type)
        runner = RunnerFactory.create_runner(path, self._options, engine)
        if engine is RunnerType.VAIML:
            self._engines[name] = runner.engine
        try:
            return Pipeline(runner, prepare, finish, batch=batch,
                            batch_wait_ms=_CHUNK_WAIT_MS if batch > 1 else 0.0)  # fmt: skip
        except BaseException:
            runner.close()
            raise

    def _detector(self, size: tuple[int, int]) -> Pipeline:
        """The detector pipeline for ``size``; at most :data:`DETECTORS` stay open (the
        sizes used last): each holds its session's memory for pages of its size."""
        if size in self._det:
            self._det.move_to_end(size)
            return self._det[size]
        while len(self._det) >= DETECTORS:
            _, oldest = self._det.popitem(last=False)
            oldest.close()
            oldest.runner.close()
        self._det[size] = self._pipeline(
            self.models.name("det"), place, find_lines, input_format="rgbx",
            input_shapes={"x": (1, 3, *size)}, mean=(PIXEL_MEAN,) * 3,
            std=(PIXEL_STD,) * 3, colour_order="rgb",
        )  # fmt: skip
        return self._det[size]

    def _recogniser(self, batch: int, width: int) -> Pipeline:
        if (batch, width) not in self._rec:
            name = self.models.name("rec")
            shape = (batch, 3, HEIGHT, width)
            options: dict[str, Any] = {"batch_size": batch, "input_shapes": {"x": shape}}
            if self._rec_capacity is None:  # PP-OCRv4's: the compiler derives no shape
                self._rec_capacity = _unbounded(compiled(name, **options))
            if self._rec_capacity:
                capacity = (batch, width // 8, len(self.models.characters))
                options["output_capacity"] = {self.models.rec_output: capacity}
            self._rec[batch, width] = self._pipeline(name, warp, self._read_text, batch,
                                                     **options)  # fmt: skip
        return self._rec[batch, width]

    def _classifier(self) -> Pipeline:
        if self._cls is None:
            self._cls = self._pipeline(
                self.models.name("cls"), warp, upside_down, REC_BATCH, batch_size=REC_BATCH,
                input_shapes={"x": (REC_BATCH, 3, HEIGHT, CLS_WIDTH)},
            )  # fmt: skip
        return self._cls


def _run(
    pipeline: Pipeline, items: Sequence[LineItem | None], batch: int
) -> tuple[list[Any], float, float]:
    """``items`` through ``pipeline`` (whole jobs of ``batch`` rows): the values, the
    seconds of ``prepare`` and those of the runs and ``finish``. Raises
    :class:`_LineFailed` with the first line's error."""
    values: list[Any] = []
    prepare = run = 0.0
    for k, result in enumerate(list(pipeline.map(items))):  # to the end: no early exit
        if result.error is not None:
            raise _LineFailed(_model_error(pipeline, result.error))
        t = result.timings
        prepare += t["prepare"]
        run += t["finish"] + (t["infer"] if k % batch == 0 else 0.0)  # a job's rows share it
        values.append(result.value)
    return values, prepare, run


def _line(pixels: npt.NDArray[np.uint8], crops: Any, index: int) -> LineItem | None:
    if index < 0:
        return None
    return LineItem(pixels, crops.homographies[index], int(crops.widths[index]))


def _lines(quads: npt.NDArray[np.float64], texts: list[tuple[str, float]]) -> list[OcrLine]:
    lines = []
    for quad, (text, score) in zip(quads, texts, strict=True):
        if not text.strip() or score < TEXT_SCORE:
            continue
        x0, y0 = quad.min(axis=0)
        x1, y1 = quad.max(axis=0)
        corners = tuple((float(x), float(y)) for x, y in quad)
        lines.append(OcrLine((int(x0), int(y0), int(x1), int(y1)), corners, text, score))  # type: ignore[arg-type]
    return lines


def _unbounded(path: Any) -> bool:
    """Whether the compiled model's output has a dim with no bound (-1)."""
    return any(d < 0 for d in load_model(path).outputs[0].hw.shape)


def _model_error(pipeline: Pipeline, error: BaseException) -> BaseException:
    """A runner's status as an :class:`OcrError` naming the model; other errors as they are."""
    if isinstance(error, JobError):
        return OcrError(f"{pipeline.runner.model.name}: {error}")
    return error


def _failed(page: PageItem, error: BaseException) -> Result:
    return Result(page.image, None, error, None, page.index, {})


def _unwrap(result: Result) -> OcrResult:
    value: OcrResult = result.unwrap()
    return value
