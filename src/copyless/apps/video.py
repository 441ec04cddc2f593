"""copyless-video: classify every frame of one or many videos, the decoder's planes bound to
one model.

    copyless-video -i clip.mp4 [-i cam2.mp4 ...] [-m MODEL] [-o annotated.mp4] [-n 100]
                   [--batch B] [--batch-wait MS] [--metrics-port [HOST:]PORT] [--runner openvino]
                   [--serve [HOST:]PORT [--serve-fps F]]

The stages overlap:

1. One decoder thread per input (PyAV, FFmpeg's own threads) yields I420/NV12 planes over
   the decoder's frame memory (:class:`copyless.vision.VideoSource`; the built-in models are
   compiled for the decoder's line sizes, so no copy even when lines are padded; a model
   compiled for compact planes gets padded lines compacted, counted as ``copied``) into a
   bounded queue per stream (:class:`copyless.vision.StreamSet`). From a file it waits for
   room; from a live source (camera, URL, pipe: ``--live`` forces it) it drops that stream's
   oldest queued frame, counted per stream, so no stream stalls another.
2. Each stream's queue is one source of a :class:`copyless.Pipeline` (``map_sources``): it
   takes the streams round robin, batches across them (up to ``--batch`` frames, waiting at
   most ``--batch-wait`` ms for more once the first is ready) and keeps ``--slots`` jobs in
   flight. ``prepare`` hands over the frame's planes as HW input tensors
   (``USER_POINTER_CMA``): at batch 1 bound in place, no copy; at batch B > 1 the pipeline
   writes each plane once into the frame's row of the batch tensors (one copy per plane,
   counted as ``batched``). The graph converts colours, crops, resizes and normalises (the
   model is compiled with ``--input-format i420|nv12 --input-size HxW --batch-size B``).
3. ``finish`` reads the frame's outputs in place (:mod:`._video_tasks`): for a classifier
   the top-1 label, printed as ``frame N: ID LABEL SCORE`` (``stream S frame N: ...`` with
   more than one input, S numbering the inputs in the order given, each stream's frames in
   order), for a text detector ``frame N: K text boxes`` and the boxes as copyless-detect
   prints them; drawn into the ``-o`` video (with several inputs one file per stream,
   ``NAME.S.SUFFIX``; a live source's dropped frames are not written).

The closing block has a line per stream (frames, FPS, latency from decode to result p50 and
p99, drops, its error), the stages per frame (the pipeline's figures; decode the decoders')
and the totals. ``--metrics-port`` serves the per-stream figures live in Prometheus' text
format (:mod:`._video_metrics`). One stream failing (corrupt data, a cut, a size change, a
disconnect) is reported and the others go on.

``--serve HOST:PORT`` (loopback unless a host is named; port 0 picks one, and the URL is
printed on stderr) serves a live page while the streams play (:mod:`._live`): a tile per
stream with its latest annotated frame as MJPEG and its FPS, p50/p99 latency and drops, and
``/metrics`` for Prometheus; after the inputs end the page keeps the final frames and
figures until SIGINT or SIGTERM (then exit 0, or 1 after a failure). Frames are JPEG-encoded
only while a client watches, at most ``--serve-fps`` a second per stream, on the page's own
thread (:mod:`._board`): the app only hands over each result (:meth:`StreamSet.subscribe`).

SIGINT or SIGTERM during the run stops the inputs; the jobs running end and their frames are
printed and written, the ``-o`` files are finished, the closing block is printed and the app
exits 130 (SIGINT) / 143 (SIGTERM) with one line on stderr (with ``--serve`` too, at once:
the page does not serve on after an interrupted run). A second signal stops at once.

Default model: the built-in EfficientNet-Lite0 compiled for the clip's format, size and
colour matrix (resize 256 / crop 224 in the graph), cached; ``-m ppocr-det`` the built-in
PP-OCRv4 text detector, ``-m face`` CenterFace and ``-m layout`` PP-PicoDet layout (decoding
and NMS folded into the graph: ``frame N: K detections`` then ``box:`` lines as
copyless-detect prints them), compiled the same way. All inputs must share one size and
pixel format (one model). Exit status: 0 when every frame was classified, 1 when decoding or
inference failed part way (the results so far are printed and the ``-o`` files are
finished), 2 for a bad argument, source or model.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..memory import NpuTensor
from ..pipeline import Pipeline, PipelineStats, Result, Row, StageClock
from ..runner import Runner, RunnerFactory, RunnerOptions, frame_shape
from ..types import (
    CopylessError,
    JobError,
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
)
from ._checks import UsageError, check_output
from ._live import LivePage
from ._serve import parse_address as serve_address
from ._setup import (
    EXIT_USAGE,
    add_runner_argument,
    engine_line,
    runner_options,
    runner_type,
    say_precision,
)
from ._signals import Interruption
from ._video_inputs import (
    FFmpegErrors,
    check_inputs,
    common_info,
    model_for,
    model_planes,
    open_writers,
)
from ._video_metrics import MetricsServer, parse_address, stream_lines
from ._video_tasks import FrameResult, task_for

#: Frames per run of the built-in models, and the longest wait for a batch to fill. Batch 1:
#: on a CPU engine EfficientNet-Lite0 on 640x480 I420 planes, 2 async slots, showed no steady
#: gain per frame at batch 2, 4 or 8 (0.81-1.17x batch 1 over two interleaved runs of
#: ``copyless-bench video_batch``, README), so frames of many streams go through the slots
#: one by one, bound in place, with no copy. ``--batch`` is for engines that gain from
#: batches (GPUs: not measured); the wait only matters then.
DEFAULT_BATCH = 1
DEFAULT_BATCH_WAIT_MS = 5.0
#: The containers ``-o`` writes (H.264, else MPEG-4 Part 2, fits each).
VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".avi")
PROG = "copyless-video"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
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
        # the page's address is bound before any other work
        page = LivePage.open(args.input, args.serve, args.serve_fps) if args.serve else None
    except (UsageError, CopylessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    interrupted, code = Interruption(PROG), 1
    try:
        with interrupted:
            code = _open_and_run(args, address, page, interrupted)
            if page is not None and code != EXIT_USAGE and not interrupted.interrupted:
                page.serve_until_signal()  # its own handlers: a signal there ends it, exit code
    finally:
        if page is not None:
            page.close()
    return interrupted.exit_code(code)


def _open_and_run(
    args: argparse.Namespace,
    address: tuple[str, int] | None,
    page: LivePage | None,
    interrupted: Interruption,
) -> int:
    try:
        streams = StreamSet(args.input, queue=args.queue, threads=args.threads,
                            live=args.live or None, max_frames=args.max_frames)  # fmt: skip
    except VideoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    interrupted.on_signal(streams.stop)  # the first signal stops the decoders
    if page is not None:  # the page reads the figures and gets each result (a reference)
        page.show_figures(streams.stats)
        streams.subscribe(page.publish)
    try:
        with streams, FFmpegErrors() as errors:
            return _run(streams, args, errors, address, interrupted)
    except BrokenPipeError:  # stdout closed early (e.g. piped into head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _run(
    streams: StreamSet,
    args: argparse.Namespace,
    errors: FFmpegErrors,
    address: tuple[str, int] | None,
    interrupted: Interruption,
) -> int:
    try:
        info = common_info(streams)
        model = model_for(args.model, streams, info, args.batch or DEFAULT_BATCH)
        with RunnerFactory.create_runner(model, _options(args), runner_type(args)) as runner:
            print(engine_line(runner), file=sys.stderr)
            say_precision(runner)
            planes = model_planes(runner)
            for source in streams.sources:
                if planes != source.info.input_format:
                    source.use_planes(planes)  # e.g. an NV12 model on I420: one CPU pass
            inputs = check_inputs(runner, streams, args.batch)
            streams.queue = max(args.queue, inputs[0].shape[0])
            app = _Video(runner, inputs, streams, info, model)
            app.writers = open_writers(args.output, len(streams), info)
            server = MetricsServer(streams, address) if address else None
            try:
                return app.run(args, errors.messages, interrupted)
            finally:
                if server is not None:
                    server.close()
                for writer in app.writers:
                    writer.close()  # the -o files are finished whatever happened
    except CopylessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _options(args: argparse.Namespace) -> dict[str, Any]:
    options = runner_options(args, max_concurrent_runs=args.slots)
    if runner_type(args) is not RunnerType.OPENVINO and args.device == "cpu":
        # only async jobs run here: the sync engines, sized for them (cores // slots
        # threads each), are theirs; no second set loaded on the first job
        options["num_threads"] = RunnerOptions(max_concurrent_runs=args.slots) \
            .async_engine_threads()  # fmt: skip
        options["async_engines"] = "shared"
    return options


def _warm_up(runner: Runner) -> str | None:
    """One untimed job on blank tensors (starts the async engines, as the VART-ML samples'
    prime phase does): None, or why it failed."""
    ins, outs = (
        [runner.allocate_npu_tensor(info) for info in runner.get_tensors_info(way, TensorType.HW)]
        for way in (TensorDirection.INPUT, TensorDirection.OUTPUT)
    )
    handle = runner.execute_async([ins], [outs])
    status = handle.status
    if status is StatusCode.SUCCESS:
        status = runner.wait(handle, -1)
    return None if status is StatusCode.SUCCESS else f"warm-up inference returned {status.name}"


class _Tally:
    """What ``prepare`` counts on the pipeline's worker threads: frames, runs (a frame in row
    0 starts one), frames whose padded plane lines were compacted (a copy)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.frames = self.runs = self.copied = 0

    def add(self, frame: StreamFrame, row: int) -> None:
        with self._lock:
            self.frames += 1
            self.runs += row == 0
            self.copied += frame.frame.copied


class _Video:
    """The app's ``prepare`` and ``finish`` for :class:`copyless.Pipeline`, and what it does
    with each result (print, write, publish) and with the figures at the end."""

    def __init__(self, runner: Runner, inputs: list[NpuTensorInfo], streams: StreamSet,
                 info: StreamInfo, model: Path) -> None:  # fmt: skip
        outs = runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW)
        quant = runner.get_quant_parameters(outs[0].name) if outs else None
        self.task = task_for(outs, quant, info, model)
        self.runner, self.streams, self.batch = runner, streams, inputs[0].shape[0]
        self.planes = [dataclasses.replace(i, shape=frame_shape(i)) for i in inputs]  # 1 frame
        self.writers: list[VideoWriter] = []
        self.multi = len(streams) > 1
        self.tally = _Tally()
        self.output = StageClock(("output",))  # print, write, publish: the main thread's part
        self.failure: str | None = None

    def prepare(self, item: StreamFrame, inputs: Row) -> list[NpuTensor]:
        """The frame's planes as HW input tensors over the decoder's memory
        (USER_POINTER_CMA): bound in place at batch 1, no copy; at batch > 1 the pipeline
        copies each into the frame's row of the batch tensors (one copy per plane)."""
        self.tally.add(item, inputs.row)
        return [NpuTensor(info, plane, MemoryType.USER_POINTER_CMA)
                for info, plane in zip(self.planes, item.frame.planes, strict=True)]  # fmt: skip

    def finish(self, item: StreamFrame, outputs: Row) -> FrameResult:
        """The frame's result, read from its outputs in place (``outputs.row``: its row of a
        data-dependent output shared by the job's frames)."""
        return self.task(outputs, item.frame.index, outputs.row)

    def run(self, args: argparse.Namespace, errors: list[str], interrupted: Interruption) -> int:
        """Decode, infer and show every frame; ``errors`` collects FFmpeg's messages."""
        failure = _warm_up(self.runner)
        if failure is not None:
            print(f"error: {failure}", file=sys.stderr)
            return 1
        with Pipeline(self.runner, self.prepare, self.finish, slots=args.slots,
                      batch=self.batch, batch_wait_ms=args.batch_wait) as pipeline:  # fmt: skip
            interrupted.on_signal(pipeline.stop)  # the frames taken still come out
            self.streams.start()
            sources = {s: self.streams.frames(s) for s in range(len(self.streams))}
            for result in pipeline.map_sources(sources):
                if result.error is None:
                    self._show(result.item, result.value)
                elif self.failure is None:  # the first failure stops the run
                    self.failure = self._why(result)
                    pipeline.stop()
                    self.streams.stop()
            figures = pipeline.stats()
        stats = self.streams.stats()
        live = any(source.info.live for source in self.streams.sources)
        for line in [*stream_lines(stats), *self._block(figures, stats, live, len(errors))]:
            print(line)
        return self._status(stats, errors, live)

    def _show(self, item: StreamFrame, result: FrameResult) -> None:
        """Print, write and publish one frame's result (each stream's frames in order)."""
        t0 = time.perf_counter()
        lines = result.lines
        if self.multi:
            lines = [f"stream {item.stream} {lines[0]}", *lines[1:]]
        print("\n".join(lines))
        if self.writers:
            self.writers[item.stream].write(item.frame, result.banner, result.boxes)
        annotated = Annotated(item.stream, item.frame, tuple(lines), result.banner, result.boxes)
        self.streams.publish(annotated, item.decoded)
        self.output.add("output", time.perf_counter() - t0)

    def _why(self, result: Result) -> str:
        index = result.item.frame.index if result.item is not None else result.index
        where = f"stream {result.source} frame {index}" if self.multi else f"frame {index}"
        if isinstance(result.error, JobError):
            return f"{where}: inference returned {result.error.status.name}"
        return f"{where}: {result.error}"

    def _block(
        self, figures: PipelineStats, stats: list[StreamStats], live: bool, errors: int
    ) -> list[str]:
        """The closing block: seconds per frame of each stage, then the counts."""
        stage, tally = figures.stages, self.tally
        decoded = sum(s.decoded for s in stats)
        seconds = [
            ("decode", sum(s.decode_seconds for s in stats) / max(1, decoded)),
            ("preprocess", stage["prepare"].mean),
            # each frame of a job carries the job's time: a job of B frames counts once
            ("infer", stage["infer"].mean * tally.runs / max(1, tally.frames)),
            ("postprocess", stage["finish"].mean + self.output.snapshot()["output"].mean),
        ]
        lines = [f"{name:<24}{sec * 1000.0:.3f} ms / frame" for name, sec in seconds]
        lines.append(f"{'total':<24}{sum(s for _, s in seconds) * 1000.0:.3f} ms / frame")
        fps = figures.done / figures.elapsed if figures.elapsed else 0.0
        lines.append(f"{'throughput (pipeline)':<24}{fps:.3f} FPS")
        lines.append(f"{'frames':<24}{figures.done}")
        if self.batch > 1 and tally.frames:
            lines.append(f"{'batched':<24}{tally.frames} frames in {tally.runs} runs (planes "
                         "written once into the batch tensors)")  # fmt: skip
        if live:
            dropped = sum(s.dropped for s in stats)
            lines.append(f"{'dropped':<24}{dropped} (the model could not keep up)")
        if tally.copied:
            lines.append(f"{'copied':<24}{tally.copied} frames (padded plane lines compacted)")
        if errors:
            lines.append(f"{'decoder errors':<24}{errors}")
        return lines

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


if __name__ == "__main__":
    sys.exit(main())
