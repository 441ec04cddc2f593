"""One copyless-video run over an open StreamSet and runner: the ``prepare`` and ``finish``
that :class:`copyless.Pipeline` calls, what the main thread does with each result (print,
write the ``-o`` video, publish to the live page) and the closing block."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time

from ...memory import NpuTensor
from ...model import task_of
from ...pipeline import ItemTensors, Pipeline, PipelineStats, Result, StageClock
from ...runner import Runner, frame_shape
from ...types import JobError, MemoryType, NpuTensorInfo, TensorDirection, TensorType
from ...vision import Annotated, StreamFrame, StreamInfo, StreamSet, StreamStats, VideoWriter
from .._output import Output
from .._signals import Interruption
from ._figures import stream_lines
from ._inputs import FrameWriter, ImageFrameWriter
from ._tasks import TaskResult, task_for

__all__ = ["VideoRun"]


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


class VideoRun:
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
        self.runner.warm_up()  # the engines' first runs and threads, before the first frame
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
