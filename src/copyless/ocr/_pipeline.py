"""OcrPipeline: PP-OCR detection, crops and recognition as one zero-copy pipeline.

The life of a page: decode -> the detector's RGBx input written in one resize pass
(:func:`~copyless.vision.place_page`; normalisation is in the compiled graph) -> detect ->
the probability map read in place by the DB postprocess (:func:`~copyless.vision.text_quads`)
-> each line's perspective crop sampled straight from the decoded page into the
recogniser's bound batch tensor (:func:`~copyless.vision.warp_lines`; optionally the angle
classifier's first) -> recognise, batched by width bucket -> CTC greedy decoding of the
bound output in place. No crop image, no stacked copy, no intermediate page.

:meth:`OcrPipeline.read_all` overlaps pages: page k+1's detection is submitted
(``execute_async``) before page k's lines are recognised.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..runner import Runner, RunnerFactory
from ..types import CopylessError, JobHandle, RunnerType, StatusCode, TensorDirection, TensorType
from ..vision import decode, line_crops, order_lines, place_page, text_quads, warp_lines
from ._ctc import ctc_greedy
from ._geometry import PagePlan, page_plan
from ._models import PIXEL_MEAN, PIXEL_STD, OcrModels, compiled
from ._results import OcrLine, OcrResult, StageTimes

__all__ = ["OcrError", "OcrPipeline"]

logger = logging.getLogger(__name__)

HEIGHT = 48
#: recogniser input widths (RapidOCR pads a batch to max(320, 48 x its widest ratio))
WIDTHS = (320, 480, 640, 960, 1280, 1920)
REC_BATCH = 6
#: batch sizes the recogniser is compiled at: a chunk of n lines runs at the smallest >= n
REC_BATCHES = (1, 2, 3, REC_BATCH)
CLS_WIDTH = 192
CLS_THRESHOLD = 0.9
TEXT_SCORE = 0.5
Image = str | os.PathLike[str] | npt.NDArray[np.uint8]


class OcrError(CopylessError):
    """A model run failed (the status is in the message)."""


@dataclass(frozen=True, slots=True)
class _Bound:
    """A runner and its input/output tensors, bound once and reused."""

    runner: Runner
    x: NpuTensor
    y: NpuTensor
    shape: tuple[int, ...]

    @classmethod
    def open(
        cls,
        path: Path,
        options: Mapping[str, Any],
        runner_type: RunnerType,
        output_shape: tuple[int, ...] | None = None,
    ) -> _Bound:
        """Open a runner on ``path`` and allocate its tensors; ``output_shape`` is the
        capacity of an output whose shape the model does not declare (PP-OCRv4's
        recogniser: ``[N, W / 8, classes]``)."""
        runner = RunnerFactory.create_runner(path, options, runner_type)
        (xi,) = runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW)
        (yi,) = runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW)
        shape = yi.shape
        if output_shape is not None and any(d < 0 for d in yi.shape):
            # unknown rank gives shape (-1,): a flat capacity, read back as output_shape
            flat = (math.prod(output_shape),) if len(yi.shape) == 1 else output_shape
            yi = dataclasses.replace(yi, shape=flat)
            shape = output_shape
        x, y = runner.allocate_npu_tensor(xi), runner.allocate_npu_tensor(yi)
        return cls(runner, x, y, shape)

    def output(self) -> npt.NDArray[Any]:
        """The output tensor's memory as an array of the model's output shape (no copy)."""
        return self.y.numpy().reshape(self.shape)

    def run(self) -> None:
        status = self.runner.execute([[self.x]], [[self.y]])
        if status is not StatusCode.SUCCESS:
            raise OcrError(f"{self.runner.model.name}: execute returned {status.name}")


@dataclass(slots=True)
class _Page:
    """A page between detection and recognition."""

    image: npt.NDArray[np.uint8]
    plan: PagePlan
    det: _Bound
    job: JobHandle | None
    times: StageTimes
    start: float


class OcrPipeline:
    """Read text lines from page images with PP-OCR models (see the module docstring).

    ``generation``: ``"v6"`` (``rapidocr`` 3.x's models) or ``"v4"`` (``rapidocr-onnxruntime``'s);
    default the newest installed. ``angle``: run the angle classifier and turn lines it
    reads as upside down (score > 0.9). ``runner_type``/``options``: the runners' engine
    and options (e.g. ``RunnerType.OPENVINO``). Models are compiled on first use per shape
    and cached (see :mod:`._models`); runners are opened lazily and kept until
    :meth:`close`.

    Copies: the page is decoded once; the detector input is one resize pass from it; crops
    are sampled from it into the recogniser's tensor; outputs are read in place. Results
    (:class:`OcrResult`) hold plain Python values, nothing that aliases the tensors.
    """

    def __init__(
        self,
        generation: str | None = None,
        *,
        angle: bool = False,
        runner_type: RunnerType = RunnerType.ONNXRUNTIME,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.models = OcrModels.load(generation)
        self.angle = bool(angle)
        self._runner_type = runner_type
        # one job per runner (each page slot has its own detector runner): the async
        # detection then gets every core's thread, not a share of them
        self._options = {"max_concurrent_runs": 1, **(options or {})}
        self._det: dict[tuple[int, int], list[_Bound]] = {}
        self._rec: dict[tuple[int, int], _Bound] = {}
        self._cls: _Bound | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._last_done = 0.0

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close every runner (idempotent); the pipeline cannot be used afterwards."""
        self._closed = True
        bound = [b for pair in self._det.values() for b in pair]
        bound += list(self._rec.values()) + ([self._cls] if self._cls else [])
        for item in bound:
            item.runner.close()
        self._det.clear()
        self._rec.clear()
        self._cls = None

    def __enter__(self) -> OcrPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ------------------------------------------------------------------------

    def read(self, image: Image) -> OcrResult:
        """The text lines of one image (a path or an RGB ``(H, W, 3)`` uint8 array)."""
        return self._finish(self._submit(image, 0))

    def read_all(self, images: Iterable[Image]) -> Iterator[OcrResult]:
        """The results of ``images`` in order; page k+1's detection runs while page k's
        lines are recognised."""
        pending: _Page | None = None
        for index, image in enumerate(images):
            page = self._submit(image, index % 2)
            if pending is not None:
                yield self._finish(pending)
            pending = page
        if pending is not None:
            yield self._finish(pending)

    # -- stages -------------------------------------------------------------------------

    def _bound(
        self, name: str, output_shape: tuple[int, ...] | None = None, **compile_options: Any
    ) -> _Bound:
        if self._closed:
            raise OcrError("the OCR pipeline is closed")
        path = compiled(name, **compile_options)
        return _Bound.open(path, self._options, self._runner_type, output_shape)

    def _detector(self, size: tuple[int, int], slot: int) -> _Bound:
        with self._lock:
            pair = self._det.get(size)
            if pair is None:
                pair = self._det[size] = []
            while len(pair) <= slot:
                pair.append(
                    self._bound(
                        self.models.name("det"),
                        input_format="rgbx",
                        input_shapes={"x": (1, 3, *size)},
                        mean=(PIXEL_MEAN,) * 3,
                        std=(PIXEL_STD,) * 3,
                        colour_order="rgb",
                    )
                )
            return pair[slot]

    def _recogniser(self, batch: int, width: int) -> _Bound:
        with self._lock:
            if (batch, width) not in self._rec:
                shape = (batch, width // 8, len(self.models.characters))
                extra = {}
                if self.models.rec_output is not None:
                    extra["output_capacity"] = {self.models.rec_output: shape}
                self._rec[batch, width] = self._bound(
                    self.models.name("rec"),
                    shape,
                    input_shapes={"x": (batch, 3, HEIGHT, width)},
                    **extra,
                )
            return self._rec[batch, width]

    def _classifier(self) -> _Bound:
        with self._lock:
            if self._cls is None:
                self._cls = self._bound(
                    self.models.name("cls"),
                    (REC_BATCH, 2),
                    input_shapes={"x": (REC_BATCH, 3, HEIGHT, CLS_WIDTH)},
                )
            return self._cls

    def _submit(self, image: Image, slot: int) -> _Page:
        """Decode, write the detector's input and submit its run (async)."""
        start = time.perf_counter()
        times = StageTimes()
        pixels = _as_image(image)
        times.decode = time.perf_counter() - start
        t0 = time.perf_counter()
        plan = page_plan(*pixels.shape[:2])
        det = self._detector(plan.size, slot)
        place_page(pixels, det.x, plan.rect)
        job = det.runner.execute_async([[det.x]], [[det.y]])
        if job.status is not StatusCode.SUCCESS:
            raise OcrError(f"detector refused the page: {job.status.name}")
        times.detect = time.perf_counter() - t0
        return _Page(pixels, plan, det, job, times, start)

    def _finish(self, page: _Page) -> OcrResult:
        times = page.times
        t0 = time.perf_counter()
        assert page.job is not None  # set by _submit
        status = page.det.runner.wait(page.job, -1)
        if status is not StatusCode.SUCCESS:
            raise OcrError(f"detector run failed: {status.name}")
        quads, _ = self._quads(page)
        times.detect += time.perf_counter() - t0
        lines: list[OcrLine] = []
        if len(quads):
            if self.angle:
                t1 = time.perf_counter()
                turn = self._turned(page.image, quads)
                times.crops += time.perf_counter() - t1
            else:
                turn = None
            lines = self._recognise(page.image, quads, turn, times)
        done = time.perf_counter()
        # overlapped pages: a page's total is the wall time since the previous page was
        # done (or since it was submitted, when that is later), so totals add up to the run
        times.total = done - max(page.start, self._last_done)
        self._last_done = done
        return OcrResult(tuple(lines), page.image.shape[:2], times)

    def _quads(self, page: _Page) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """DB quads in page pixels, clipped, small ones dropped, in reading order."""
        prob = page.det.output()[0, 0]
        quads, scores = text_quads(prob)
        if not len(quads):
            return quads, scores
        rx, ry, rw, rh = page.plan.rect
        ph, pw = page.plan.page
        pts = quads.copy()
        # RapidOCR rounds map -> page coordinates to whole pixels, then clips
        pts[..., 0] = np.clip(np.round((pts[..., 0] - rx) * pw / rw), 0, pw - 1)
        pts[..., 1] = np.clip(np.round((pts[..., 1] - ry) * ph / rh), 0, ph - 1)
        wide = np.linalg.norm(pts[:, 0] - pts[:, 1], axis=1).astype(int) > 3
        tall = np.linalg.norm(pts[:, 0] - pts[:, 3], axis=1).astype(int) > 3
        keep = wide & tall
        pts, scores = pts[keep], scores[keep]
        order = order_lines(pts)
        return pts[order], scores[order]

    def _turned(self, image: npt.NDArray[np.uint8], quads: npt.NDArray[np.float64]) -> Any:
        """The angle classifier's verdict per line: True where it reads 180 degrees."""
        cls = self._classifier()
        crops = line_crops(quads, height=HEIGHT, max_width=CLS_WIDTH)
        turn = np.zeros(len(quads), dtype=bool)
        batch = cls.x.numpy()
        for first in range(0, len(quads), REC_BATCH):
            idx = np.arange(first, min(first + REC_BATCH, len(quads)))
            slots = np.arange(len(idx), dtype=np.int32)
            warp_lines(image, batch, crops.homographies[idx], crops.widths[idx], slots)
            cls.run()
            probs = cls.output()[: len(idx)]
            turn[idx] = (probs.argmax(axis=1) == 1) & (probs.max(axis=1) > CLS_THRESHOLD)
        return turn

    def _recognise(
        self, image: npt.NDArray[np.uint8], quads: npt.NDArray[np.float64], turn: Any,
        times: StageTimes,
    ) -> list[OcrLine]:
        t0 = time.perf_counter()
        crops = line_crops(quads, height=HEIGHT, max_width=WIDTHS[-1], turn=turn)
        order = np.argsort(crops.ratios, kind="stable")
        texts: list[tuple[str, float]] = [("", 0.0)] * len(quads)
        times.crops += time.perf_counter() - t0
        for first in range(0, len(order), REC_BATCH):
            idx = order[first : first + REC_BATCH]
            widest = int(crops.widths[idx].max())
            width = WIDTHS[min(int(np.searchsorted(WIDTHS, widest)), len(WIDTHS) - 1)]
            rec = self._recogniser(_batch_for(len(idx)), width)
            t1 = time.perf_counter()
            slots = np.arange(len(idx), dtype=np.int32)
            warp_lines(image, rec.x.numpy(), crops.homographies[idx], crops.widths[idx], slots)
            t2 = time.perf_counter()
            rec.run()
            decoded = ctc_greedy(rec.output()[: len(idx)], self.models.characters)
            for i, result in zip(idx, decoded, strict=True):
                texts[int(i)] = result
            times.crops += t2 - t1
            times.recognise += time.perf_counter() - t2
        lines = []
        for quad, (text, score) in zip(quads, texts, strict=True):
            if not text.strip() or score < TEXT_SCORE:
                continue
            x0, y0 = quad.min(axis=0)
            x1, y1 = quad.max(axis=0)
            corners = tuple((float(x), float(y)) for x, y in quad)
            lines.append(OcrLine((int(x0), int(y0), int(x1), int(y1)), corners, text, score))  # type: ignore[arg-type]
        return lines


def _batch_for(lines: int) -> int:
    return next(size for size in REC_BATCHES if size >= lines)


def _as_image(image: Image) -> npt.NDArray[np.uint8]:
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] not in (3, 4):
            raise ValueError(f"image must be uint8 (H, W, 3) RGB, got {image.dtype} {image.shape}")
        return image
    return decode(Path(image))
