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
3. ``finish`` reads the frame's outputs in place (:mod:`._tasks`); the main thread
   prints ``frame N: ID LABEL SCORE`` (``stream S frame N: ...`` with several inputs, S the
   input's position, each stream's frames in order; text boxes or detections as
   copyless-detect prints them) and draws it into the ``-o`` video (one file per stream,
   ``NAME.S.SUFFIX``, with several inputs; dropped frames are not written).

The closing block: a line per stream (frames, FPS, latency decode to result p50/p99, drops,
its error), the stages per frame (the pipeline's figures; decode the decoders') and totals.
``--metrics-port`` serves the per-stream figures in Prometheus' text format
(:mod:`._metrics`). A failing stream is reported and the others go on.

``--serve HOST:PORT`` (loopback unless a host is named; port 0 picks one; the URL goes to
stderr) serves a live page (:mod:`._live`, :mod:`._board`, :mod:`._page`): a tile per
stream (latest frame as MJPEG, encoded only while watched, at most ``--serve-fps`` a
second) and ``/metrics`` (the collector ``--metrics-port`` serves); after the inputs end it
serves the final frames until SIGINT/SIGTERM (then the run's status).

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
import os
import sys

from ...model import class_names
from ...runner import RunnerFactory
from ...types import (
    Address,
    CopylessError,
    OptionError,
    parse_address,
)
from ...vision import (
    StreamSet,
    VideoError,
)
from .._checks import UsageError, check_output
from .._memory import add_memory_argument
from .._output import Output, add_output_arguments
from .._setup import EXIT_USAGE, add_runner_argument, engine_line, runner_type, say_precision
from .._signals import Interruption
from ._inputs import (
    FFmpegErrors,
    check_frame_inputs,
    check_inputs,
    check_memory,
    common_info,
    engine_options,
    frame_writer,
    model_for,
    model_planes,
    open_writers,
)
from ._live import LivePage
from ._metrics import MetricsServer
from ._run import VideoRun

#: Frames per run of the built-in models, and the longest wait for a batch to fill. Batch 1:
#: on a CPU engine EfficientNet-Lite0 on 640x480 I420 planes, 2 async slots, showed no steady
#: gain per frame at batch 2, 4 or 8 (0.81-1.17x batch 1 over two interleaved runs of
#: ``python benchmarks/video_batch.py``, README), so frames of many streams go through the slots
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
    p.add_argument("--metrics-port", metavar="[HOST:]PORT", type=_tcp_address, help="serve "
                   "per-stream metrics in Prometheus' text format at http://HOST:PORT/metrics "
                   "(HOST default 127.0.0.1) while the app runs")  # fmt: skip
    p.add_argument("--serve", metavar="[HOST:]PORT", type=_tcp_address, help="serve a live "
                   "page (loopback unless a host is named) until SIGINT/SIGTERM")  # fmt: skip
    p.add_argument("--serve-fps", type=float, default=5.0, help="JPEGs per second per stream "
                   "at most for the page, made only while someone watches (default 5)")  # fmt: skip
    add_output_arguments(p)
    return p


def _tcp_address(text: str) -> Address:
    """``--serve`` and ``--metrics-port``: copyless-serve's parser, TCP only."""
    try:
        return parse_address(text, unix=False)
    except OptionError as exc:
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
            code = _open_and_run(args, page, interrupted)
            if page is not None and code != EXIT_USAGE and not interrupted.interrupted:
                page.serve_until_signal()  # its own handlers: a signal there ends it, exit code
    finally:
        if page is not None:
            page.close()
    return interrupted.exit_code(code)


def _open_and_run(
    args: argparse.Namespace,
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
            return _run(streams, args, errors, interrupted)
    except BrokenPipeError:  # stdout closed early (e.g. piped into head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _run(
    streams: StreamSet,
    args: argparse.Namespace,
    errors: FFmpegErrors,
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
            app = VideoRun(runner, inputs, streams, info, labels, frames)
            app.out = Output.from_args(args)
            app.writers = open_writers(args.output, len(streams), info)
            metrics = args.metrics_port
            server = MetricsServer(streams.stats, metrics) if metrics else None
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
