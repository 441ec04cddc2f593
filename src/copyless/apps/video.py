"""copyless-video: classify every frame of one or many videos, the decoder's planes bound to
one model.

    copyless-video -i clip.mp4 [-i cam2.mp4 ...] [-m MODEL] [-o annotated.mp4] [-n 100]
                   [--batch B] [--batch-wait MS] [--metrics-port [HOST:]PORT] [--runner openvino]
                   [--serve [HOST:]PORT [--serve-fps F]]

The pipeline (three stages overlap):

1. One decoder thread per input (PyAV, FFmpeg's own threads) yields I420/NV12 planes over
   the decoder's frame memory (:class:`copyless.vision.VideoSource`; the built-in models are
   compiled for the decoder's line sizes, so no copy even when lines are padded; a model
   compiled for compact planes gets padded lines compacted, counted as ``copied``) into a
   bounded queue per stream (:class:`copyless.vision.StreamSet`). From a file it waits for
   room; from a live source (camera, URL, pipe: ``--live`` forces it) it drops that stream's
   oldest queued frame, counted per stream, so no stream stalls another.
2. The main thread assembles batches across the streams (up to ``--batch`` frames, waiting
   at most ``--batch-wait`` ms for more once the first is ready, round robin over the
   streams) and submits them with ``execute_async`` into one of ``--slots`` slots. At batch
   1 the planes are wrapped as HW input tensors (``USER_POINTER_CMA``, bound in place); at
   batch B > 1 each plane is written once into the slot's batch tensor (one copy per plane,
   counted as ``batched``). The graph converts colours, crops, resizes and normalises (the
   model is compiled with ``--input-format i420|nv12 --input-size HxW --batch-size B``).
3. When a slot comes round again its job is collected: for a classifier the top-1 label
   printed as ``frame N: ID LABEL SCORE`` (``stream S frame N: ...`` with more than one
   input, S numbering the inputs in the order given, each stream's frames in order), for a
   text detector ``frame N: K text boxes`` and the boxes as copyless-detect prints them
   (:mod:`._video_tasks`); drawn into the ``-o`` video (with several inputs one file per
   stream, ``NAME.S.SUFFIX``; a live source's dropped frames are not written).

The closing block has a line per stream (frames, FPS, latency from decode to result p50 and
p99, drops, its error) and the totals. ``--metrics-port`` serves the same per stream, live,
in Prometheus' text format (:mod:`._video_metrics`). One stream failing (corrupt data, a
cut, a size change, a disconnect) is reported and the others go on.

``--serve HOST:PORT`` (loopback unless a host is named; port 0 picks one, and the URL is
printed on stderr) serves a live page while the streams play (:mod:`._live`): a tile per
stream with its latest annotated frame as MJPEG and its FPS, p50/p99 latency and drops, and
``/metrics`` for Prometheus; after the inputs end the page keeps the final frames and
figures until SIGINT or SIGTERM. Frames are JPEG-encoded only while a client watches, at
most ``--serve-fps`` a second per stream, on the page's own thread (:mod:`._board`): the
pipeline only hands over each result (:meth:`StreamSet.subscribe`).

Default model: the built-in EfficientNet-Lite0 compiled for the clip's format, size and
colour matrix (resize 256 / crop 224 in the graph), cached; ``-m ppocr-det`` the built-in
PP-OCRv4 text detector, ``-m face`` CenterFace and ``-m layout`` PP-PicoDet layout (decoding
and NMS folded into the graph, one frame per job: ``frame N: K detections`` then ``box:``
lines as copyless-detect prints them), compiled the same way. All inputs must share one
size and pixel format (one model). Exit status: 0 when every frame was classified, 1 when
decoding or inference failed part way (the results so far are printed and the ``-o`` files
are finished), 2 for a bad argument, source or model.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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
    Annotated,
    StreamFrame,
    StreamInfo,
    StreamSet,
    StreamStats,
    VideoError,
    VideoWriter,
    import_av,
)
from ._checks import UsageError, check_model_path, check_output
from ._live import LivePage
from ._models import CLASSIFIER
from ._serve import parse_address as serve_address
from ._setup import (
    EXIT_USAGE,
    add_runner_argument,
    engine_line,
    runner_options,
    runner_type,
    say_precision,
)
from ._video_metrics import MetricsServer, parse_address, stream_lines
from ._video_tasks import BUILTIN, VideoTask, builtin_for, compact_line_sizes, task_for
from .bench.stages import now

#: Frames per run of the built-in models, and the longest wait for a batch to fill. Batch 1:
#: on a CPU engine EfficientNet-Lite0 on 640x480 I420 planes, 2 async slots, showed no steady
#: gain per frame at batch 2, 4 or 8 (0.81-1.17x batch 1 over two interleaved runs of
#: ``copyless-bench video_batch``, README), so frames of many streams go through the slots
#: one by one, bound in place, with no copy. ``--batch`` is for engines that gain from
#: batches (GPUs: not measured); the wait only matters then.
DEFAULT_BATCH = 1
DEFAULT_BATCH_WAIT_MS = 5.0
#: With no new frame for this long, the results in flight are delivered anyway.
_IDLE = 0.05
#: The containers ``-o`` writes (H.264, else MPEG-4 Part 2, fits each).
VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".avi")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="copyless-video", description=__doc__.splitlines()[0])
    p.add_argument("-i", "--input", required=True, action="append", help="video file, URL, "
                   "FIFO or /dev/videoN; repeat for more streams on the same model")  # fmt: skip
    p.add_argument("-m", "--model", help="compiled model taking i420/nv12 planes of the clip's "
                   "size, or a built-in model compiled for the clip: efficientnet-lite0 "
                   "(default, classifier), ppocr-det (text boxes), face (CenterFace) or "
                   "layout (PP-PicoDet)")  # fmt: skip
    p.add_argument("-o", "--output", help="write the annotated video here (every frame; one "
                   "file per stream, NAME.S.SUFFIX, with several inputs)")  # fmt: skip
    p.add_argument("-n", "--max-frames", type=int, help="stop each stream after this many frames")
    add_runner_argument(p)
    p.add_argument("--batch", type=int, help="frames per run, across the streams (built-in "
                   f"models: default {DEFAULT_BATCH}, the best measured on CPU; a compiled "
                   "model: its batch size)")  # fmt: skip
    p.add_argument("--batch-wait", type=float, default=DEFAULT_BATCH_WAIT_MS, help="ms to wait "
                   f"for a batch to fill (default {DEFAULT_BATCH_WAIT_MS:g})")  # fmt: skip
    p.add_argument("--slots", type=int, default=2, help="jobs in flight (default 2)")
    p.add_argument("--queue", type=int, default=4, help="decoded frames queued per stream "
                   "(default 4, at least the batch)")  # fmt: skip
    p.add_argument("--live", action="store_true", help="drop frames the model cannot keep up "
                   "with (default: only for cameras, URLs and pipes)")  # fmt: skip
    p.add_argument("--threads", type=int, default=0, help="decoder threads (0: FFmpeg's choice)")
    p.add_argument("--metrics-port", metavar="[HOST:]PORT", help="serve per-stream metrics "
                   "in Prometheus' text format at http://HOST:PORT/metrics (HOST default "
                   "127.0.0.1) while the app runs")  # fmt: skip
    p.add_argument("--serve", metavar="[HOST:]PORT", type=_serve_address, help="serve a live "
                   "page (loopback unless a host is named) until SIGINT/SIGTERM")  # fmt: skip
    p.add_argument("--serve-fps", type=float, default=5.0, help="JPEGs per second per stream "
                   "at most for the page, made only while someone watches (default 5)")  # fmt: skip
    return p


def _serve_address(text: str) -> tuple[str, int]:
    try:
        return serve_address(text)
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
    batched: int = 0  # frames whose planes were written into a batch tensor (a copy)
    runs: int = 0

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
        if self.batched:
            lines.append(f"{'batched':<24}{self.batched} frames in {self.runs} runs (planes "
                         "written once into the batch tensors)")  # fmt: skip
        if live:
            lines.append(f"{'dropped':<24}{self.dropped} (the model could not keep up)")
        if self.copied:
            lines.append(f"{'copied':<24}{self.copied} frames (padded plane lines compacted)")
        if errors:
            lines.append(f"{'decoder errors':<24}{errors}")
        return lines


@dataclass
class _InFlight:
    outputs: list[NpuTensor]
    inputs: list[NpuTensor] | None = None  # the batch tensors (batch > 1)
    frames: list[StreamFrame] = field(default_factory=list)
    handle: JobHandle | None = None
    submitted: float = 0.0
    finished: list[float] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for flag in ("max_frames", "slots", "queue", "batch"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    if args.batch_wait < 0:
        parser.error("--batch-wait must be >= 0")
    if not args.serve_fps > 0:
        parser.error("--serve-fps must be > 0")
    try:
        address = parse_address(args.metrics_port) if args.metrics_port else None
    except ValueError as exc:
        parser.error(str(exc))
    try:
        if args.output is not None:  # before any work: a late failure would lose it all
            check_output(args.output, VIDEO_SUFFIXES, "video")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:  # the page's address is bound before any other work
        page = LivePage.open(args.input, args.serve, args.serve_fps) if args.serve else None
    except CopylessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        code = _open_and_run(args, address, page)
        if page is not None and code != EXIT_USAGE:
            page.serve_until_signal()
        return code
    finally:
        if page is not None:
            page.close()


def _open_and_run(
    args: argparse.Namespace, address: tuple[str, int] | None, page: LivePage | None
) -> int:
    try:
        streams = StreamSet(args.input, queue=args.queue, threads=args.threads,
                            live=args.live or None, max_frames=args.max_frames)  # fmt: skip
    except VideoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if page is not None:  # the page reads the figures and gets each result (a reference)
        page.show_figures(streams.stats)
        streams.subscribe(page.publish)
    try:
        with streams, _FFmpegErrors() as errors:
            return _run(streams, args, errors, address)
    except BrokenPipeError:  # stdout closed early (e.g. piped into head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


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


def _common_info(streams: StreamSet) -> StreamInfo:
    """The inputs' shared geometry; VideoError naming the first input that differs."""
    first = streams.sources[0].info
    key = (first.width, first.height, first.input_format, first.yuv_matrix, first.yuv_range)
    for i, source in enumerate(streams.sources[1:], 1):
        info = source.info
        if (info.width, info.height, info.input_format, info.yuv_matrix, info.yuv_range) != key:
            raise VideoError(
                f"input {i} ({source.source}) is {info.width}x{info.height} {info.input_format} "
                f"{info.yuv_matrix}/{info.yuv_range}, input 0 is {first.width}x{first.height} "
                f"{first.input_format} {first.yuv_matrix}/{first.yuv_range}: one model takes "
                "one size and format; run such streams in separate copyless-video processes"
            )
    return first


def _line_sizes(streams: StreamSet) -> tuple[int, int] | None:
    """The decoders' line sizes when every stream has the same, else None (compact)."""
    sizes = {source.line_sizes() for source in streams.sources}
    return sizes.pop() if len(sizes) == 1 else None


def _run(
    streams: StreamSet,
    args: argparse.Namespace,
    errors: _FFmpegErrors,
    address: tuple[str, int] | None,
) -> int:
    try:
        info = _common_info(streams)
        name = args.model or CLASSIFIER
        builtin = name in BUILTIN
        if builtin:
            batch = args.batch or DEFAULT_BATCH
            model = builtin_for(name, info, _line_sizes(streams), batch)
        else:
            model = Path(name)
        try:
            check_model_path(model)
        except UsageError as exc:
            raise VideoError(f"{exc} (built-in models: {', '.join(BUILTIN)})") from None
        options = runner_options(args, max_concurrent_runs=args.slots)
        if runner_type(args) is not RunnerType.OPENVINO and args.device == "cpu":
            # only async jobs run here: the sync engines, sized for them (cores // slots
            # threads each), are theirs; no second set loaded on the first job
            sized = RunnerOptions(max_concurrent_runs=args.slots)
            options["num_threads"] = sized.async_engine_threads()
            options["async_engines"] = "shared"
        with RunnerFactory.create_runner(model, options, runner_type(args)) as runner:
            print(engine_line(runner), file=sys.stderr)
            say_precision(runner)
            planes = _model_planes(runner)
            for source in streams.sources:
                if planes != source.info.input_format:
                    source.use_planes(planes)  # e.g. an NV12 model on I420: one CPU pass
            inputs = _check_inputs(runner, streams, args.batch)
            streams.queue = max(args.queue, inputs[0].shape[0])
            writers = _writers(args.output, len(streams), info)
            server = MetricsServer(streams, address) if address else None
            try:
                pipeline = _Pipeline(runner, inputs, writers, args, info, model)
                return pipeline.run(streams, errors.messages)
            finally:
                if server is not None:
                    server.close()
                for writer in writers:
                    writer.close()
    except CopylessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _writers(output: str | None, count: int, info: StreamInfo) -> list[VideoWriter]:
    """One annotated video per stream: ``output`` itself for one input, else ``NAME.S.SUFFIX``."""
    if output is None:
        return []
    path = Path(output)
    paths = [path] if count == 1 else [path.with_name(f"{path.stem}.{s}{path.suffix}")
                                       for s in range(count)]  # fmt: skip
    writers: list[VideoWriter] = []
    try:
        for target in paths:
            writers.append(VideoWriter(target, info.width, info.height, info.rate))
    except VideoError:
        for writer in writers:
            writer.close()
        raise
    return writers


def _model_planes(runner: Runner) -> str:
    """``"nv12"`` for a model of two inputs (Y, UV), else ``"i420"``."""
    return "nv12" if runner.get_num_input_tensors() == 2 else "i420"


def _check_inputs(runner: Runner, streams: StreamSet, batch: int | None) -> list[NpuTensorInfo]:
    """The model's HW inputs, checked against the planes of the sources' frames: compact,
    or with the decoder's line padding (then each ``source.padded`` is set: no copy at
    all); any batch size, equal to ``--batch`` when given."""
    infos = runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW)
    source = streams.sources[0]
    info, got = source.info, [i.shape[1:] for i in infos]
    compact = _plane_shapes(info.input_format, info.height, compact_line_sizes(info))
    padded = _plane_shapes(info.input_format, info.height, source.line_sizes())
    model_batch = infos[0].shape[0] if infos and infos[0].shape else 0
    if any(i.data_type is not DataType.UINT8 for i in infos) or got not in (compact, padded) \
            or any(i.shape[0] != model_batch for i in infos):  # fmt: skip
        raise VideoError(
            f"the model takes {[i.describe() for i in infos]}; this clip gives "
            f"{info.input_format} planes {[(1, *s) for s in compact]} uint8: compile it with "
            f"--input-format {info.input_format} --input-size {info.height}x{info.width}"
        )
    if batch is not None and batch != model_batch:
        raise VideoError(f"--batch {batch}: the model is compiled for batch {model_batch}")
    for each in streams.sources:
        if got == padded and got != compact and each.line_sizes() != source.line_sizes():
            raise VideoError(
                f"{each.source} has other line sizes than {source.source}; use a model "
                "compiled for compact planes"
            )
        each.padded = got == padded and got != compact
    return infos


def _plane_shapes(fmt: str, height: int, lines: tuple[int, int]) -> list[tuple[int, ...]]:
    """Plane shapes of one frame, without the batch dim."""
    rows = (height + 1) // 2
    if fmt == "nv12":
        return [(height, lines[0]), (rows, lines[1] // 2, 2)]
    return [(height, lines[0]), (rows, lines[1]), (rows, lines[1])]


class _Pipeline:
    """Decoder threads -> batches across streams -> async slots -> in-order postprocess."""

    def __init__(
        self,
        runner: Runner,
        inputs: list[NpuTensorInfo],
        writers: list[VideoWriter],
        args: argparse.Namespace,
        info: StreamInfo,
        model: Path,
    ) -> None:
        self.runner, self.inputs, self.writers, self.args = runner, inputs, writers, args
        self.batch = inputs[0].shape[0]
        outs = runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW)
        quant = runner.get_quant_parameters(outs[0].name) if outs else None
        self.task: VideoTask = task_for(outs, quant, info, model)
        self.slots = [
            _InFlight([runner.allocate_npu_tensor(o) for o in outs],
                  [runner.allocate_npu_tensor(i) for i in inputs] if self.batch > 1 else None)
            for _ in range(args.slots)
        ]  # fmt: skip
        self.times = _Times()
        self.failure: str | None = None
        self.multi = False
        self.streams: StreamSet | None = None

    def warm_up(self) -> bool:
        """One untimed job on blank planes (starts the async engines, as the VART-ML
        samples' prime phase does); False, with the failure set, when it fails."""
        blank = self.slots[0].inputs or [self.runner.allocate_npu_tensor(i) for i in self.inputs]
        handle = self.runner.execute_async([blank], [self.slots[0].outputs])
        status = handle.status
        if status is StatusCode.SUCCESS:
            status = self.runner.wait(handle, -1)
        if status is not StatusCode.SUCCESS:
            self.failure = f"warm-up inference returned {status.name}"
        return self.failure is None

    def run(self, streams: StreamSet, errors: list[str]) -> int:
        """Decode, infer and postprocess every frame; ``errors`` collects FFmpeg's messages."""
        if not self.warm_up():
            print(f"error: {self.failure}", file=sys.stderr)
            return 1
        self.streams, self.multi = streams, len(streams) > 1
        start = now()
        streams.start()
        self._consume(streams)
        for slot in self._in_order():
            self._finish(slot)
        wall = now() - start
        stats = streams.stats()
        self.times.decoded = sum(s.decoded for s in stats)
        self.times.decode = sum(s.decode_seconds for s in stats)
        self.times.dropped = sum(s.dropped for s in stats)
        live = any(source.info.live for source in streams.sources)
        for line in [*stream_lines(stats), *self.times.block(wall, live, len(errors))]:
            print(line)
        return self._status(stats, errors, live)

    def _status(self, stats: list[StreamStats], errors: list[str], live: bool) -> int:
        failed = [s for s in stats if s.error is not None]
        for s in failed:
            where = f"stream {s.index} ({s.source}): " if self.multi else ""
            print(f"error: {where}{s.error}", file=sys.stderr)
        if errors and self.failure is None and not live:
            self.failure = (
                f"the decoder reported {len(errors)} error(s) (FFmpeg: {errors[0]!r}): "
                "the stream is damaged or ends mid-frame; the frames above may show it"
            )
        if self.failure is not None:
            print(f"error: {self.failure}", file=sys.stderr)
        return 1 if failed or self.failure is not None else 0

    def _consume(self, streams: StreamSet) -> None:
        wait, submitted = self.args.batch_wait / 1000.0, 0
        for batch in streams.batches(self.batch, wait, idle=_IDLE):
            if not batch:  # no frame for a while (a paused camera): deliver what is done
                for pending in self._in_order():
                    if not self._finish(pending):
                        return
                continue
            slot = self.slots[submitted % len(self.slots)]
            submitted += 1
            if slot.handle is not None and not self._finish(slot):
                return
            if not self._submit(slot, batch):
                return

    def _submit(self, slot: _InFlight, batch: list[StreamFrame]) -> bool:
        t0 = now()
        if slot.inputs is None:  # batch 1: bind the decoder's planes in place
            (item,) = batch
            tensors = [
                NpuTensor(info, plane, MemoryType.USER_POINTER_CMA)
                for info, plane in zip(self.inputs, item.frame.planes, strict=True)
            ]
        else:  # batch B: each plane written once into its row of the batch tensors
            tensors = slot.inputs
            for row, item in enumerate(batch):
                for tensor, plane in zip(tensors, item.frame.planes, strict=True):
                    np.copyto(tensor.numpy()[row], plane.reshape(tensor.get_info().shape[1:]))
            self.times.batched += len(batch)
        slot.submitted = now()
        self.times.preprocess += slot.submitted - t0
        self.times.copied += sum(item.frame.copied for item in batch)
        self.times.runs += 1
        slot.finished.clear()
        done = slot.finished.append
        handle = self.runner.execute_async([tensors], [slot.outputs], lambda _h: done(now()))
        if handle.status is not StatusCode.SUCCESS:
            self.failure = f"{self._name(batch[0])}: execute_async returned {handle.status.name}"
            return False
        slot.frames, slot.handle = batch, handle
        return True

    def _name(self, item: StreamFrame) -> str:
        return f"stream {item.stream} frame {item.frame.index}" if self.multi \
            else f"frame {item.frame.index}"  # fmt: skip

    def _in_order(self) -> list[_InFlight]:
        pending = [s for s in self.slots if s.handle is not None and s.frames]
        return sorted(pending, key=lambda s: s.submitted)

    def _finish(self, slot: _InFlight) -> bool:
        """Collect the slot's job and postprocess its frames; False when the job failed."""
        batch, handle = slot.frames, slot.handle
        slot.frames, slot.handle = [], None
        if not batch or handle is None:
            return True
        status = self.runner.wait(handle, -1)
        self.times.infer += (slot.finished[0] if slot.finished else now()) - slot.submitted
        if status is not StatusCode.SUCCESS:
            self.failure = f"{self._name(batch[0])}: inference returned {status.name}"
            return False
        t0 = now()
        for row, item in enumerate(batch):
            result = self.task(slot.outputs, item.frame.index, row)
            lines = result.lines
            if self.multi:
                lines = [f"stream {item.stream} {lines[0]}", *lines[1:]]
            print("\n".join(lines))
            if self.writers:
                self.writers[item.stream].write(item.frame, result.banner, result.boxes)
            if self.streams is not None:
                annotated = Annotated(item.stream, item.frame, tuple(lines), result.banner,
                                      result.boxes)  # fmt: skip
                self.streams.publish(annotated, item.decoded)
        self.times.postprocess += now() - t0
        self.times.done += len(batch)
        return True


if __name__ == "__main__":
    sys.exit(main())
