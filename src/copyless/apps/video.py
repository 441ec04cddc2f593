"""copyless-video: classify every frame of a video, the decoder's planes bound to the model.

    copyless-video -i clip.mp4 [-m MODEL] [-o annotated.mp4] [--runner openvino] [-n 100]
                   [--serve [HOST:]PORT]

The pipeline (three stages overlap):

1. A decoder thread (PyAV, FFmpeg's own threads) yields I420/NV12 planes over the decoder's
   frame memory (:class:`copyless.vision._video.VideoSource`; the built-in models are compiled
   for the decoder's line sizes, so no copy even when lines are padded; a model compiled for
   compact planes gets padded lines compacted, counted as ``copied``) into a bounded queue.
   From a file it waits for room; from a live source (camera, URL, pipe: ``--live`` forces
   it) it drops the oldest queued frame, and the closing block counts the frames dropped.
2. The main thread wraps the planes as HW input tensors (``USER_POINTER_CMA``, bound in
   place) and submits them with ``execute_async`` into one of ``--slots`` slots; the graph
   converts colours, crops, resizes and normalises (the model is compiled with
   ``--input-format i420|nv12 --input-size HxW``).
3. When a slot comes round again its job is collected in order: for a classifier the top-1
   label printed as ``frame N: ID LABEL SCORE``, for a text detector ``frame N: K text
   boxes`` and the boxes as copyless-detect prints them (:mod:`._video_tasks`); drawn into
   the ``-o`` video (every frame of a file; a live source's dropped frames are not written).

``--serve HOST:PORT`` (loopback unless a host is named; port 0 picks one, and the URL is
printed on stderr) serves a live page of the stream while it plays (:mod:`._serve`: the
latest annotated frame as MJPEG, FPS, p50/p99 decode-to-result latency and drops, and
``/metrics`` for Prometheus); after the input ends the page keeps showing the final frame
and figures until SIGINT or SIGTERM. Frames are JPEG-encoded only while a client watches, at
most ``--serve-fps`` a second, on the board's own thread (:mod:`._board`).

Default model: the built-in EfficientNet-Lite0 compiled for the clip's format, size and
colour matrix (resize 256 / crop 224 in the graph), cached; ``-m ppocr-det`` the built-in
PP-OCRv4 text detector, compiled the same way. Exit status: 0 when every frame
was classified, 1 when decoding or inference failed part way (the results so far are
printed and the ``-o`` file is finished), 2 for a bad argument, source or model.
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..memory import NpuTensor
from ..runner import Runner, RunnerFactory, RunnerOptions
from ..types import (
    CopylessError,
    DataType,
    JobHandle,
    MemoryType,
    NpuTensorInfo,
    RunnerType,
    StatusCode,
    TensorDirection,
    TensorType,
)
from ..vision import (
    Box,
    StreamInfo,
    VideoError,
    VideoFrame,
    VideoSource,
    VideoWriter,
    import_av,
)
from ._board import StreamMeter
from ._live import LivePage
from ._models import CLASSIFIER
from ._serve import parse_address
from ._setup import EXIT_USAGE, add_runner_argument, runner_options, runner_type
from ._video_tasks import BUILTIN, builtin_for, compact_line_sizes, task_for
from .bench.stages import now

_END = object()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="copyless-video", description=__doc__.splitlines()[0])
    p.add_argument("-i", "--input", required=True, help="video file, URL, FIFO or /dev/videoN")
    p.add_argument("-m", "--model", help="compiled model taking i420/nv12 planes of the clip's "
                   "size, or a built-in model compiled for the clip: efficientnet-lite0 "
                   "(default, classifier) or ppocr-det (text boxes)")  # fmt: skip
    p.add_argument("-o", "--output", help="write the annotated video here (every frame)")
    p.add_argument("-n", "--max-frames", type=int, help="stop after this many frames")
    add_runner_argument(p)
    p.add_argument("--slots", type=int, default=2, help="jobs in flight (default 2)")
    p.add_argument("--queue", type=int, default=4, help="decoded frames queued (default 4)")
    p.add_argument("--live", action="store_true", help="drop frames the model cannot keep up "
                   "with (default: only for cameras, URLs and pipes)")  # fmt: skip
    p.add_argument("--threads", type=int, default=0, help="decoder threads (0: FFmpeg's choice)")
    p.add_argument("--serve", metavar="[HOST:]PORT", type=_address, help="serve a live "
                   "page (loopback unless a host is named) until SIGINT/SIGTERM")  # fmt: skip
    p.add_argument("--serve-fps", type=float, default=5.0, help="JPEGs per second at most for "
                   "the page, made only while someone watches (default 5)")  # fmt: skip
    return p


def _address(text: str) -> tuple[str, int]:
    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass
class _Times:
    """Seconds per stage, summed over the frames, and the frame counts."""

    decode: float = 0.0
    preprocess: float = 0.0
    infer: float = 0.0
    postprocess: float = 0.0
    decoded: int = 0
    done: int = 0
    dropped: int = 0
    copied: int = 0  # frames whose padded plane lines were compacted (a copy)

    def block(self, wall: float, live: bool, errors: int = 0) -> list[str]:
        n = max(1, self.done)
        stages = [
            ("decode", self.decode / max(1, self.decoded)),
            ("preprocess", self.preprocess / n),
            ("infer", self.infer / n),
            ("postprocess", self.postprocess / n),
        ]
        lines = [f"{name:<24}{sec * 1000.0:.3f} ms / frame" for name, sec in stages]
        lines.append(f"{'total':<24}{sum(s for _, s in stages) * 1000.0:.3f} ms / frame")
        lines.append(f"{'throughput (pipeline)':<24}{self.done / wall if wall else 0.0:.3f} FPS")
        lines.append(f"{'frames':<24}{self.done}")
        if live:
            lines.append(f"{'dropped':<24}{self.dropped} (the model could not keep up)")
        if self.copied:
            lines.append(f"{'copied':<24}{self.copied} frames (padded plane lines compacted)")
        if errors:
            lines.append(f"{'decoder errors':<24}{errors}")
        return lines


@dataclass
class _Slot:
    output: NpuTensor
    frame: VideoFrame | None = None
    handle: JobHandle | None = None
    submitted: float = 0.0
    decoded: float = 0.0  # when the decoder handed the frame over
    finished: list[float] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for flag in ("max_frames", "slots", "queue"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    if not args.serve_fps > 0:
        parser.error("--serve-fps must be > 0")
    try:
        live = _Live(args) if args.serve else None
    except CopylessError as exc:  # the address cannot be bound: before any other work
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        code = _open_and_run(args, live)
        if live is not None and code != EXIT_USAGE:
            live.serve_until_signal()
        return code
    finally:
        if live is not None:
            live.close()


def _open_and_run(args: argparse.Namespace, live: _Live | None) -> int:
    try:
        source = VideoSource(args.input, threads=args.threads, live=args.live or None)
    except VideoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with source, _FFmpegErrors() as errors:
            return _run(source, args, errors, live)
    except BrokenPipeError:  # stdout closed early (e.g. piped into head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


@dataclass(frozen=True, slots=True)
class _Shown:
    """A frame's result as the live page shows it (``rgb()`` runs on the board's thread)."""

    stream: int
    frame: VideoFrame
    banner: str
    boxes: tuple[Box, ...]

    def rgb(self) -> Any:
        """The frame as RGB (libswscale: a conversion and a new array)."""
        return self.frame.frame.to_ndarray(format="rgb24")


class _Live:
    """``--serve``: the live page and the meter of the stream's figures."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.meter = StreamMeter(0, str(args.input))
        self.page = LivePage.open([str(args.input)], args.serve, args.serve_fps)
        self.page.show_figures(lambda: [self.meter.figures()])

    def publish(self, frame: VideoFrame, banner: str, boxes: tuple[Box, ...],
                decoded: float) -> None:  # fmt: skip
        self.meter.record(decoded, now())
        self.page.publish(_Shown(0, frame, banner, boxes))

    def serve_until_signal(self) -> None:
        self.page.serve_until_signal()

    def close(self) -> None:
        self.page.close()


class _FFmpegErrors(logging.Handler):
    """Collects FFmpeg's error messages while the app runs (PyAV forwards them to the
    ``libav`` logger once its level is set). FFmpeg conceals a damaged or cut-off frame and
    goes on; these messages are how the app learns of it."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []
        self._av = import_av()
        self._logger = logging.getLogger("libav")

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> _FFmpegErrors:
        self._level, self._propagate = self._av.logging.get_level(), self._logger.propagate
        self._av.logging.set_level(self._av.logging.ERROR)
        self._logger.addHandler(self)
        self._logger.propagate = False  # reported once, in the app's own words
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.propagate = self._propagate
        self._av.logging.set_level(self._level)


def _run(
    source: VideoSource, args: argparse.Namespace, errors: _FFmpegErrors, live: _Live | None
) -> int:
    info = source.info
    try:
        name = args.model or CLASSIFIER
        builtin = name in BUILTIN
        model = builtin_for(name, info, source.line_sizes()) if builtin else Path(name)
        if not model.exists():
            raise VideoError(f"no model at {model} (built-in models: {', '.join(BUILTIN)})")
        options = runner_options(args, max_concurrent_runs=args.slots)
        if runner_type(args) is RunnerType.ONNXRUNTIME and args.device == "cpu":
            # only async jobs run here: size the engines for them up front, so the runner
            # does not load a second set (cores // slots threads each) on the first job
            sized = RunnerOptions(max_concurrent_runs=args.slots)
            options["num_threads"] = sized.async_engine_threads()
        with RunnerFactory.create_runner(model, options, runner_type(args)) as runner:
            planes = _model_planes(runner)
            if planes != info.input_format:
                source.use_planes(planes)  # e.g. an NV12 model on an I420 clip: one CPU pass
            inputs = _check_inputs(runner, source)
            writer = VideoWriter(args.output, info.width, info.height, info.rate) if args.output \
                else None  # fmt: skip
            try:
                pipeline = _Pipeline(runner, inputs, writer, args, info, live)
                return pipeline.run(source, errors.messages)
            finally:
                if writer is not None:
                    writer.close()
    except CopylessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _model_planes(runner: Runner) -> str:
    """``"nv12"`` for a model of two inputs (Y, UV), else ``"i420"``."""
    return "nv12" if runner.get_num_input_tensors() == 2 else "i420"


def _check_inputs(runner: Runner, source: VideoSource) -> list[NpuTensorInfo]:
    """The model's HW inputs, checked against the planes of the source's frames: compact, or
    with the decoder's line padding (then ``source.padded`` is set: no copy at all)."""
    infos = runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW)
    info, got = source.info, [i.shape for i in infos]
    compact = _plane_shapes(info.input_format, info.height, compact_line_sizes(info))
    padded = _plane_shapes(info.input_format, info.height, source.line_sizes())
    if any(i.data_type is not DataType.UINT8 for i in infos) or got not in (compact, padded):
        raise VideoError(
            f"the model takes {[i.describe() for i in infos]}; this clip gives "
            f"{info.input_format} planes {compact} uint8: compile it with --input-format "
            f"{info.input_format} --input-size {info.height}x{info.width}"
        )
    source.padded = got == padded and got != compact
    return infos


def _plane_shapes(fmt: str, height: int, lines: tuple[int, int]) -> list[tuple[int, ...]]:
    rows = (height + 1) // 2
    if fmt == "nv12":
        return [(1, height, lines[0]), (1, rows, lines[1] // 2, 2)]
    return [(1, height, lines[0]), (1, rows, lines[1]), (1, rows, lines[1])]


class _Pipeline:
    """Decoder thread -> bounded queue -> async slots -> in-order postprocess."""

    def __init__(
        self,
        runner: Runner,
        inputs: list[NpuTensorInfo],
        writer: VideoWriter | None,
        args: argparse.Namespace,
        info: StreamInfo,
        live: _Live | None = None,
    ) -> None:
        self.runner, self.inputs, self.writer, self.args = runner, inputs, writer, args
        self.live = live
        outputs = runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW)
        if len(outputs) != 1:
            raise VideoError(f"copyless-video needs a model with one output, not {len(outputs)}")
        out_info = outputs[0]
        self.task = task_for(out_info, runner.get_quant_parameters(out_info.name), info)
        self.slots = [_Slot(runner.allocate_npu_tensor(out_info)) for _ in range(args.slots)]
        self.times = _Times()
        self.failure: str | None = None

    def warm_up(self) -> bool:
        """One untimed job on blank planes (starts the async engines, as the VART-ML
        samples' prime phase does); False, with the failure set, when it fails."""
        blank = [self.runner.allocate_npu_tensor(info) for info in self.inputs]
        handle = self.runner.execute_async([blank], [[self.slots[0].output]])
        status = handle.status
        if status is StatusCode.SUCCESS:
            status = self.runner.wait(handle, -1)
        if status is not StatusCode.SUCCESS:
            self.failure = f"warm-up inference returned {status.name}"
        return self.failure is None

    def run(self, source: VideoSource, errors: list[str]) -> int:
        """Decode, infer and postprocess every frame; ``errors`` collects FFmpeg's messages."""
        if not self.warm_up():
            print(f"error: {self.failure}", file=sys.stderr)
            return 1
        frames: queue.Queue[Any] = queue.Queue(maxsize=self.args.queue)
        stop = threading.Event()
        decoder = threading.Thread(
            target=self._decode, args=(source, frames, stop), name="copyless-video-decode"
        )
        start = now()
        decoder.start()
        try:
            self._consume(frames)
        finally:
            stop.set()
            decoder.join()
        for slot in self._in_order(len(self.slots)):
            self._finish(slot)
        for line in self.times.block(now() - start, source.info.live, len(errors)):
            print(line)
        if errors and self.failure is None and not source.info.live:
            self.failure = (
                f"the decoder reported {len(errors)} error(s) (FFmpeg: {errors[0]!r}): "
                "the stream is damaged or ends mid-frame; the frames above may show it"
            )
        if self.failure is not None:
            print(f"error: {self.failure}", file=sys.stderr)
            return 1
        return 0

    def _decode(self, source: VideoSource, frames: queue.Queue[Any], stop: threading.Event) -> None:
        live, times = source.info.live, self.times
        try:
            it = source.frames(self.args.max_frames)
            while not stop.is_set():
                t0 = now()
                frame = next(it, None)
                times.decode += now() - t0
                if frame is None:
                    break
                times.decoded += 1
                self._put(frames, (frame, now()), live, stop)
        except VideoError as exc:
            self._put(frames, exc, False, stop)
        except Exception as exc:  # noqa: BLE001 - the consumer must hear of any failure
            self._put(frames, VideoError(f"the decoder thread failed: {exc!r}"), False, stop)
        finally:
            self._put(frames, _END, False, stop)

    def _put(self, frames: queue.Queue[Any], item: Any, live: bool, stop: threading.Event) -> None:
        while not stop.is_set():
            if live and frames.full():
                try:
                    dropped = isinstance(frames.get_nowait(), tuple)
                    self.times.dropped += dropped
                    if dropped and self.live is not None:
                        self.live.meter.drop()
                except queue.Empty:
                    pass
            try:
                frames.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _consume(self, frames: queue.Queue[Any]) -> None:
        submitted = 0
        while True:
            item = frames.get()
            if item is _END:
                return
            if isinstance(item, Exception):
                self.failure = str(item)
                return
            slot = self.slots[submitted % len(self.slots)]
            if slot.handle is not None and not self._finish(slot):
                return
            if not self._submit(slot, *item):
                return
            submitted += 1

    def _submit(self, slot: _Slot, frame: VideoFrame, decoded: float) -> bool:
        t0 = now()
        tensors = [
            NpuTensor(info, plane, MemoryType.USER_POINTER_CMA)
            for info, plane in zip(self.inputs, frame.planes, strict=True)
        ]
        slot.submitted = now()
        self.times.preprocess += slot.submitted - t0
        self.times.copied += frame.copied
        slot.finished.clear()
        done = slot.finished.append
        handle = self.runner.execute_async([tensors], [[slot.output]], lambda _h: done(now()))
        if handle.status is not StatusCode.SUCCESS:
            self.failure = f"frame {frame.index}: execute_async returned {handle.status.name}"
            return False
        slot.frame, slot.handle, slot.decoded = frame, handle, decoded
        return True

    def _in_order(self, count: int) -> list[_Slot]:
        pending = [s for s in self.slots if s.handle is not None and s.frame is not None]
        return sorted(pending, key=lambda s: s.frame.index if s.frame else 0)[:count]

    def _finish(self, slot: _Slot) -> bool:
        """Collect the slot's job and postprocess its frame; False when the job failed."""
        frame, handle = slot.frame, slot.handle
        slot.frame, slot.handle = None, None
        if frame is None or handle is None:
            return True
        status = self.runner.wait(handle, -1)
        self.times.infer += (slot.finished[0] if slot.finished else now()) - slot.submitted
        if status is not StatusCode.SUCCESS:
            self.failure = f"frame {frame.index}: inference returned {status.name}"
            return False
        t0 = now()
        result = self.task(slot.output, frame.index)
        print("\n".join(result.lines))
        if self.writer is not None:
            self.writer.write(frame, result.banner, result.boxes)
        if self.live is not None:
            self.live.publish(frame, result.banner, result.boxes, slot.decoded)
        self.times.postprocess += now() - t0
        self.times.done += 1
        return True


if __name__ == "__main__":
    sys.exit(main())
