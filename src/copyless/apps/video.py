"""copyless-video: classify every frame of one or many videos, the decoder's planes bound to
one model.

    copyless-video -i clip.mp4 [-i cam2.mp4 ...] [-m MODEL] [-o annotated.mp4] [-n 100]
                   [--batch B] [--batch-wait MS] [--metrics-port [HOST:]PORT] [--runner openvino]
                   [--serve [HOST:]PORT [--serve-fps F]]

1. Each input (:class:`copyless.vision.StreamSet`) yields I420/NV12 planes over the
   decoder's frame memory (built-in models are compiled for the decoder's line sizes: no copy
   even for padded lines; a model compiled for compact planes gets them compacted, counted
   as ``copied``). A file or a pipe (``-i -``, a FIFO) is decoded by the pipeline's reader
   thread for its stream, as the pipeline takes frames (``start(inline=True)``: no queue of
   its own; the 4-stream p50 latency went from 172 to 58 ms); a live source (camera, network
   stream; ``--live`` makes every input live) has a decoder thread and a bounded queue
   (``--queue``) that drops its oldest frame, counted per stream.
2. Each stream is one source of a :class:`copyless.Pipeline` (``map_sources``): streams taken
   round robin, batched across (``--batch`` frames, waiting at most ``--batch-wait`` ms for
   a fuller batch), ``--slots`` jobs in flight. ``prepare`` hands over the frame's planes as
   ``USER_POINTER_CMA`` tensors: bound in place at batch 1; at batch B > 1 the pipeline
   copies each plane once into the frame's row (counted as ``batched``). The graph converts
   colours, crops, resizes and normalises (``--input-format i420|nv12 --input-size HxW``).
   A classifier (the built-in one, or any model of one RGB image input with a centre-crop
   record) instead gets each frame written into its row by ``prepare``: the pixels of the
   reference loop (PyAV's rgb24 frames, PIL's Resize(256) + CenterCrop(224)), bit for bit,
   in one C pass over the planes (:func:`copyless.vision.classify_frame`; no copy of the
   frame, padded lines read where they lie).
3. ``finish`` reads the frame's outputs in place (:mod:`._video_tasks`); the main thread
   prints ``frame N: ID LABEL SCORE`` (``stream S frame N: ...`` with several inputs, S the
   input's position, each stream's frames in order; text boxes or detections as
   copyless-detect prints them) and draws it into the ``-o`` video (one file per stream,
   ``NAME.S.SUFFIX``, with several inputs; dropped frames are not written).

The closing block: a line per stream (frames, FPS, latency decode to result p50/p99, drops,
its error), the stages per frame (the pipeline's figures; decode the decoders') and totals.
``--metrics-port`` serves the per-stream figures in Prometheus' text format
(:mod:`._video_metrics`). A failing stream is reported and the others go on.

``--serve HOST:PORT`` (loopback unless a host is named; port 0 picks one; the URL goes to
stderr) serves a live page (:mod:`._live`, :mod:`._board`): a tile per stream (latest frame
as MJPEG, encoded only while watched, at most ``--serve-fps`` a second) and ``/metrics``;
after the inputs end it serves the final frames until SIGINT/SIGTERM (then the run's status).

SIGINT/SIGTERM during the run stop the inputs: the jobs running end and their frames are
shown, the ``-o`` files are finished, the closing block printed, and the app exits 130 /
143 with one line on stderr (with ``--serve`` too, at once: no serving after an interrupted
run). A second signal stops at once.

Models: the built-in EfficientNet-Lite0 (default; the RGBx model the photo apps use,
cached); ``-m ppocr-det`` (text boxes), ``face`` (CenterFace), ``layout`` (PP-PicoDet; NMS
folded into the graph), compiled for the clip's planes, size and colour matrix; or a
compiled model. All inputs share one size and format. Exit status: 0 when every frame was
classified, 1 when decoding or inference failed part way (the results so far printed, the
``-o`` files finished), 2 for a bad argument, source or model; 130/143 after a signal.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
import time

from ..memory import NpuTensor
from ..model import class_names, task_of
from ..pipeline import ItemTensors, Pipeline, PipelineStats, Result, StageClock
from ..runner import Runner, RunnerFactory, frame_shape
from ..types import CopylessError, JobError, MemoryType, NpuTensorInfo, TensorDirection, TensorType
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
from ._memory import add_memory_argument
from ._output import Output, add_output_arguments
from ._serve import parse_address as serve_address
from ._setup import EXIT_USAGE, add_runner_argument, engine_line, runner_type, say_precision
from ._signals import Interruption
from ._video_inputs import (
    FFmpegErrors,
    FrameWriter,
    ImageFrameWriter,
    check_frame_inputs,
    check_inputs,
    check_memory,
    common_info,
    engine_options,
    frame_writer,
    model_for,
    model_planes,
    open_writers,
    warm_up,
)
from ._video_metrics import MetricsServer, parse_address, stream_lines
from ._video_tasks import TaskResult, task_for

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
                   "FIFO, - (standard input) or /dev/videoN; repeat for more streams on the "
                   "same model")  # fmt: skip
    p.add_argument("-m", "--model", help="compiled model taking i420/nv12 planes of the clip's "
                   "size, or a built-in model compiled for the clip: efficientnet-lite0 "
                   "(default, classifier), ppocr-det (text boxes), face (CenterFace) or "
                   "layout (PP-PicoDet)")  # fmt: skip
    p.add_argument("-o", "--output", help="write the annotated video here (every frame; one "
                   "file per stream, NAME.S.SUFFIX, with several inputs)")  # fmt: skip
    p.add_argument("-n", "--max-frames", type=int, help="stop each stream after this many frames")
    p.add_argument("--labels", metavar="FILE", help="class names, one per line, for a model of "
                   "your own (default: the names the model records, or the zoo's)")  # fmt: skip
    add_runner_argument(p)
    add_memory_argument(p)
    p.add_argument("--batch", type=int, help="frames per run, across the streams (built-in "
                   f"models: default {DEFAULT_BATCH}, the best measured on CPU; a compiled "
                   "model: its batch size)")  # fmt: skip
    p.add_argument("--batch-wait", type=float, default=DEFAULT_BATCH_WAIT_MS, help="ms to wait "
                   f"for a batch to fill (default {DEFAULT_BATCH_WAIT_MS:g})")  # fmt: skip
    p.add_argument("--slots", type=int, default=2, help="jobs in flight (default 2)")
    p.add_argument("--queue", type=int, default=4, help="decoded frames queued per live "
                   "stream (default 4, at least the batch; files and pipes are decoded as the "
                   "pipeline takes them)")  # fmt: skip
    p.add_argument("--live", action="store_true", help="drop frames the model cannot keep up "
                   "with, whatever the input (default: only cameras and network streams; files, "
                   "pipes and -i - are read to their end)")  # fmt: skip
    p.add_argument("--threads", type=int, default=0, help="decoder threads (0: FFmpeg's choice)")
    p.add_argument("--metrics-port", metavar="[HOST:]PORT", help="serve per-stream metrics "
                   "in Prometheus' text format at http://HOST:PORT/metrics (HOST default "
                   "127.0.0.1) while the app runs")  # fmt: skip
    p.add_argument("--serve", metavar="[HOST:]PORT", type=_serve_address, help="serve a live "
                   "page (loopback unless a host is named) until SIGINT/SIGTERM")  # fmt: skip
    p.add_argument("--serve-fps", type=float, default=5.0, help="JPEGs per second per stream "
                   "at most for the page, made only while someone watches (default 5)")  # fmt: skip
    add_output_arguments(p)
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
        check_memory(args, streams, info)
        for source in streams.sources:  # each source's first frame, decoded now: a source
            source.line_sizes()  # that is no video is refused (exit 2) before any model
        model = model_for(args.model, streams, info, args.batch or DEFAULT_BATCH)
        options = engine_options(args)
        with RunnerFactory.create_runner(model, options, runner_type(args)) as runner:
            print(engine_line(runner), file=sys.stderr)
            say_precision(runner)
            frames = frame_writer(runner, info)
            if frames is not None:  # a classifier: each frame written into its row
                inputs = check_frame_inputs(runner, streams, args.batch)
            else:  # the planes themselves are the model's inputs
                planes = model_planes(runner)
                for source in streams.sources:
                    if planes != source.info.input_format:
                        source.use_planes(planes)  # e.g. an NV12 model on I420: one CPU pass
                inputs = check_inputs(runner, streams, args.batch)
            streams.queue = max(args.queue, inputs[0].shape[0])
            labels = class_names(runner.model, args.labels)
            app = _Video(runner, inputs, streams, info, labels, frames)
            app.out = Output.from_args(args)
            app.writers = open_writers(args.output, len(streams), info)
            server = MetricsServer(streams, address) if address else None
            try:
                return app.run(args, errors.messages, interrupted)
            finally:
                if server is not None:
                    server.close()
                for writer in app.writers:
                    writer.close()  # the -o files are finished whatever happened
    except (CopylessError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


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
                 info: StreamInfo, labels: list[str],
                 frames: FrameWriter | ImageFrameWriter | None) -> None:  # fmt: skip
        outs = runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW)
        quant = runner.get_quant_parameters(outs[0].name) if outs else None
        placement = None
        if isinstance(frames, ImageFrameWriter):
            writer = frames
            placement = lambda: writer.placement  # noqa: E731 - read when a result comes
        self.task = task_for(outs, quant, info, labels, task_of(runner.model), placement)
        self.runner, self.streams, self.batch = runner, streams, inputs[0].shape[0]
        self.planes = [dataclasses.replace(i, shape=frame_shape(i)) for i in inputs]  # 1 frame
        self.frames = frames
        self.writers: list[VideoWriter] = []
        self.multi = len(streams) > 1
        self.tally = _Tally()
        self.output = StageClock(("output",))  # print, write, publish: the main thread's part
        self.failure: str | None = None
        self.out = Output()

    def prepare(self, item: StreamFrame, inputs: ItemTensors) -> list[NpuTensor] | None:
        """A model of one image input: the frame written into its row (:class:`FrameWriter`,
        one pass over the decoder's memory; :class:`ImageFrameWriter` for a detector or
        segmenter compiled for photos: the frame as RGB, then prepared as its record says).
        Else the frame's planes as HW input tensors over
        the decoder's memory (USER_POINTER_CMA): bound in place at batch 1, no copy; at
        batch > 1 the pipeline copies each into the frame's row of the batch tensors (one
        copy per plane)."""
        self.tally.add(item, inputs.row)
        if self.frames is not None:
            self.frames(item.frame, inputs[0])
            return None
        return [NpuTensor(info, plane, MemoryType.USER_POINTER_CMA)
                for info, plane in zip(self.planes, item.frame.planes, strict=True)]  # fmt: skip

    def finish(self, item: StreamFrame, outputs: ItemTensors) -> TaskResult:
        """The frame's result, read from its outputs in place (``outputs.row``: its row of a
        data-dependent output shared by the job's frames)."""
        return self.task(outputs, item.frame.index, outputs.row)

    def run(self, args: argparse.Namespace, errors: list[str], interrupted: Interruption) -> int:
        """Decode, infer and show every frame; ``errors`` collects FFmpeg's messages."""
        failure = warm_up(self.runner)
        if failure is not None:
            print(f"error: {failure}", file=sys.stderr)
            return 1
        with Pipeline(self.runner, self.prepare, self.finish, slots=args.slots,
                      batch=self.batch, batch_wait_ms=args.batch_wait) as pipeline:  # fmt: skip
            interrupted.on_signal(pipeline.stop)  # the frames taken still come out
            self.streams.start(inline=True)  # each source's reader decodes its file
            sources = {s: self.streams.frames(s) for s in range(len(self.streams))}
            try:
                for result in pipeline.map_sources(sources):
                    if result.error is None:
                        self._show(result.item, result.value)
                    elif self.failure is None:  # the first failure stops the run
                        self.failure = self._why(result)
                        pipeline.stop()
                        self.streams.stop()
            finally:  # left early (an error, a closed stdout): no source waits on a camera
                self.streams.stop()
            figures = pipeline.stats()
        stats = self.streams.stats()
        live = any(source.info.live for source in self.streams.sources)
        self._close(figures, stats, live, len(errors))
        return self._status(stats, errors, live)

    def _show(self, item: StreamFrame, result: TaskResult) -> None:
        """Print, write and publish one frame's result (each stream's frames in order)."""
        t0 = time.perf_counter()
        lines = result.lines
        if self.multi:
            lines = [f"stream {item.stream} {lines[0]}", *lines[1:]]
        self.out.say("\n".join(lines))
        self.out.record("frame", stream=item.stream, frame=item.frame.index, **result.fields)
        if self.writers:
            self.writers[item.stream].write(item.frame, result.banner, result.boxes,
                                            result.mask)  # fmt: skip
        annotated = Annotated(item.stream, item.frame, tuple(lines), result.banner, result.boxes)
        self.streams.publish(annotated, item.decoded)
        self.output.add("output", time.perf_counter() - t0)

    def _why(self, result: Result) -> str:
        index = result.item.frame.index if result.item is not None else result.index
        where = f"stream {result.source} frame {index}" if self.multi else f"frame {index}"
        if isinstance(result.error, JobError):
            return f"{where}: inference returned {result.error.status.name}"
        return f"{where}: {result.error}"

    def _close(
        self, figures: PipelineStats, stats: list[StreamStats], live: bool, errors: int
    ) -> None:
        """The closing block: a line per stream, the stage times (not with --quiet), the
        counts; with --json a ``stream`` object per stream and the summary."""
        out = self.out
        out.say(*stream_lines(stats))
        for s in stats:
            timing = {} if out.quiet else {"fps": round(s.fps, 3),
                      "latency_p50_ms": round(s.latency_p50 * 1e3, 3),
                      "latency_p99_ms": round(s.latency_p99 * 1e3, 3)}  # fmt: skip
            out.record("stream", stream=s.index, source=str(s.source), frames=s.frames,
                       dropped=s.dropped, error=s.error, **timing)  # fmt: skip
        timings = self._timings(figures, stats)
        out.timing([*(f"{name:<24}{ms:.3f} ms / frame" for name, ms in timings.items()),
                    f"{'throughput (pipeline)':<24}{self._fps(figures):.3f} FPS"],
                   {**{f"{name}_ms": round(ms, 4) for name, ms in timings.items()},
                    "throughput_fps": round(self._fps(figures), 3)})  # fmt: skip
        counts = self._counts(figures, stats, live, errors)
        out.say(*counts)
        tally = self.tally
        out.summary(frames=figures.done, streams=len(stats), runs=tally.runs,
                    copied=tally.copied, decoder_errors=errors,
                    dropped=sum(s.dropped for s in stats))  # fmt: skip

    def _timings(self, figures: PipelineStats, stats: list[StreamStats]) -> dict[str, float]:
        """Milliseconds per frame of each stage, and their total."""
        stage, tally = figures.stages, self.tally
        decoded = sum(s.decoded for s in stats)
        seconds = {
            "decode": sum(s.decode_seconds for s in stats) / max(1, decoded),
            "preprocess": stage["prepare"].mean,
            # each frame of a job carries the job's time: a job of B frames counts once
            "infer": stage["infer"].mean * tally.runs / max(1, tally.frames),
            "postprocess": stage["finish"].mean + self.output.snapshot()["output"].mean,
        }
        ms = {name: sec * 1000.0 for name, sec in seconds.items()}
        return {**ms, "total": sum(ms.values())}

    @staticmethod
    def _fps(figures: PipelineStats) -> float:
        return figures.done / figures.elapsed if figures.elapsed else 0.0

    def _counts(
        self, figures: PipelineStats, stats: list[StreamStats], live: bool, errors: int
    ) -> list[str]:
        """The closing block's counts: frames, batched, dropped, copied, decoder errors."""
        tally = self.tally
        lines = [f"{'frames':<24}{figures.done}"]
        if self.batch > 1 and tally.frames:
            what = "frames resized" if self.frames is not None else "planes"
            lines.append(f"{'batched':<24}{tally.frames} frames in {tally.runs} runs ({what} "
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
