"""copyless-video's inputs, model and runner: one model for every stream (the same size and
pixel format). A classifier takes RGB images: :class:`FrameWriter` writes each frame's
planes into the item's row with :func:`copyless.vision.classify_frame` (the reference
pipeline's pixels: swscale's colours, PIL's resize and crop, one C pass, no copy of the
frame); any other model compiled for images (a detector's letterbox or stretch, a
segmenter) gets :class:`ImageFrameWriter` (the frame as RGB, then prepared as its record
says). Other models take the planes (:func:`check_inputs`: compact, or with the decoders'
line padding: then bound as they are, no copy). Also the runner's options and warm-up, the
annotated outputs, and FFmpeg's error messages (how the app learns of a damaged or cut-off
frame).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...memory import NpuTensor
from ...runner import Runner, RunnerOptions
from ...types import (
    DataType,
    LayoutError,
    NpuTensorInfo,
    RunnerType,
    TensorDirection,
    TensorType,
)
from ...vision import (
    ColourFormat,
    Placement,
    Preparer,
    StreamInfo,
    StreamSet,
    VideoError,
    VideoFrame,
    VideoWriter,
    classify_frame,
    colour_format_for,
    import_av,
    preparer_for,
)
from .._checks import UsageError, check_model_path
from .._memory import MemoryBudget
from .._models import CLASSIFIER, builtin_alias, builtin_model
from .._setup import runner_options, runner_type
from ._tasks import BUILTIN, builtin_for, compact_line_sizes

#: copyless-video's own peak with the built-in classifier (0.28-0.30 GB measured with
#: /usr/bin/time on 240p and 720p clips; rounded up), and the decoded frames a stream holds
#: besides its queue: FFmpeg's frame pool (its threads and reference frames), the jobs in
#: flight. Four 720p streams with --queue 16 measured 0.44 GB, this says 0.83.
VIDEO_BASE = 512 << 20
FRAMES_OUTSIDE_QUEUE = 16


def check_memory(args: argparse.Namespace, streams: StreamSet, info: StreamInfo) -> None:
    """UsageError (one line, see :mod:`._memory`) when the streams' decoded frames would
    take more memory than the app may use; names the ``--queue`` that fits."""
    frame = info.width * info.height * 3 // 2  # an I420 frame
    held = len(streams) * frame
    extra = FRAMES_OUTSIDE_QUEUE + args.slots
    estimate = VIDEO_BASE + held * (args.queue + extra)
    budget = MemoryBudget.of(args.max_memory)
    fits = (budget.limit - VIDEO_BASE) // max(1, held) - extra
    lower = f"--queue {fits} fits" if fits >= 1 else "fewer or smaller streams (no --queue fits)"
    budget.check(estimate, f"{len(streams)} stream(s) of {info.width}x{info.height} with "
                 f"--queue {args.queue}", lower)  # fmt: skip


class FFmpegErrors(logging.Handler):
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

    def __enter__(self) -> FFmpegErrors:
        self._level, self._propagate = self._av.logging.get_level(), self._logger.propagate
        self._av.logging.set_level(self._av.logging.ERROR)
        self._logger.addHandler(self)
        self._logger.propagate = False  # reported once, in the app's own words
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.propagate = self._propagate
        self._av.logging.set_level(self._level)


def common_info(streams: StreamSet) -> StreamInfo:
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


def model_for(name: str | None, streams: StreamSet, info: StreamInfo, batch: int) -> Path:
    """The compiled model ``-m`` names, or the built-in one for ``batch`` frames per run: the
    classifier for RGBx images (:class:`FrameWriter` fills them), the detectors compiled for
    these streams' planes (``info``: their :func:`common_info`; the decoders' line sizes when
    every stream has the same); VideoError when there is none."""
    name = builtin_alias(name, BUILTIN) or name or CLASSIFIER
    if name == CLASSIFIER:  # frames written by FrameWriter: the plain RGBx model, any clip
        extra: dict[str, Any] = {"batch_size": batch} if batch != 1 else {}
        model = builtin_model(CLASSIFIER, **extra)
    elif name in BUILTIN:
        sizes = {source.line_sizes() for source in streams.sources}
        model = builtin_for(name, info, sizes.pop() if len(sizes) == 1 else None, batch)
    else:
        model = Path(name)
    try:
        check_model_path(model)
    except UsageError as exc:
        raise VideoError(f"{exc} (built-in models: {', '.join(BUILTIN)})") from None
    return model


@dataclass(frozen=True, slots=True)
class FrameWriter:
    """A frame's planes into an image input (``RGBX``, ``RGBP`` ...), as the reference loop
    (PyAV's rgb24 frames, torchvision's Resize + CenterCrop) sees it: one pass of
    :func:`copyless.vision.classify_frame` over the decoder's memory (padded lines read
    where they lie), straight into the item's row of the input; nothing is copied."""

    colour: ColourFormat
    resize_short: int
    crop: int
    width: int
    height: int
    yuv_matrix: str
    yuv_range: str

    def __call__(self, frame: VideoFrame, tensor: NpuTensor) -> None:
        """Frame ``frame`` into ``tensor`` (one image: the item's row)."""
        w, h = self.width, self.height
        cw, ch = (w + 1) // 2, (h + 1) // 2
        y, *chroma = frame.planes
        planes = [y[:h, :w], *(plane[:ch, :cw] for plane in chroma)]
        classify_frame(planes, tensor, yuv_matrix=self.yuv_matrix, yuv_range=self.yuv_range,
                       colour_format=self.colour, resize_short=self.resize_short,
                       crop=self.crop)  # fmt: skip


class ImageFrameWriter:
    """A frame into an image input as the model's record says for photos (a YOLO's
    letterbox, a stretch to torchvision's detector size, host normalisation...): the
    decoder's frame converted to RGB by PyAV (swscale: one copy of the frame), then written
    into the item's row by the model's :class:`~copyless.vision.Preparer` (one fused
    pass). ``placement`` maps the model's pixels back to the frame's (the same every frame)."""

    def __init__(self, prepare: Preparer, height: int, width: int) -> None:
        self.prepare = prepare
        self.size = (height, width)
        self.placement: Placement = (1.0, 1.0)

    def __call__(self, frame: VideoFrame, tensor: NpuTensor) -> None:
        rgb = frame.frame.to_ndarray(format="rgb24")
        self.placement = self.prepare.to_photo(self.prepare(rgb, tensor), self.size)


def frame_writer(runner: Runner, info: StreamInfo) -> FrameWriter | ImageFrameWriter | None:
    """How frames reach a model of one image input: a centre-crop classifier gets
    :class:`FrameWriter` (the reference loop's pixels, one C pass), any other image model
    (a detector or segmenter compiled for photos) :class:`ImageFrameWriter`; None: the model
    takes the planes."""
    infos = runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW)
    if len(infos) != 1:
        return None
    try:
        colour_format_for(infos[0])
    except LayoutError:
        return None
    prep = preparer_for(runner, infos[0])
    bgr_rgbx = prep.bgr and prep.colour is ColourFormat.RGBX
    if prep.policy.policy != "crop" or prep.normalize is not None or (prep.bgr and not bgr_rgbx):
        return ImageFrameWriter(prep, info.height, info.width)
    colour = ColourFormat.BGRX if bgr_rgbx else prep.colour
    return FrameWriter(colour, prep.policy.short_side(prep.height), prep.height, info.width,
                       info.height, info.yuv_matrix, info.yuv_range)  # fmt: skip


def check_frame_inputs(
    runner: Runner, streams: StreamSet, batch: int | None
) -> list[NpuTensorInfo]:
    """A FrameWriter model's input, checked against ``--batch``; the decoders hand over
    their planes with the line padding (the writer reads the frame where it lies)."""
    infos = runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW)
    model_batch = infos[0].shape[0]
    if batch is not None and batch != model_batch:
        raise VideoError(f"--batch {batch}: the model is compiled for batch {model_batch}")
    for source in streams.sources:
        source.padded = True
    return infos


def model_planes(runner: Runner) -> str:
    """``"nv12"`` for a model of two inputs (Y, UV), else ``"i420"``."""
    return "nv12" if runner.get_num_input_tensors() == 2 else "i420"


def check_inputs(runner: Runner, streams: StreamSet, batch: int | None) -> list[NpuTensorInfo]:
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


def open_writers(output: str | None, count: int, info: StreamInfo) -> list[VideoWriter]:
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


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The runner's options for ``--slots`` jobs in flight (and ``--device``)."""
    options = runner_options(args, max_concurrent_runs=args.slots)
    if runner_type(args) is not RunnerType.OPENVINO and args.device == "cpu":
        # only async jobs run here: the sync engines, sized for them (cores // slots
        # threads each), are theirs; no second set loaded on the first job
        options["num_threads"] = RunnerOptions(max_concurrent_runs=args.slots) \
            .async_engine_threads()  # fmt: skip
        options["async_engines"] = "shared"
    return options
