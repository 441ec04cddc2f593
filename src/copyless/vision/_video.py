"""Video decoding (the ``copyless[video]`` extra, PyAV): decoded frames as the YUV planes a
model compiled with ``input_format="i420" | "nv12"`` takes, without colour conversion.

:class:`VideoSource` opens a file, a URL (RTSP, HTTP, UDP...), a FIFO, standard input
(``-``) or a camera (``/dev/video*``) and yields :class:`VideoFrame` objects whose
``planes`` are numpy arrays over the decoder's own frame memory:

* Copies: none when a plane's line size equals its row (the common case: 640-pixel-wide
  frames have 640-byte luma lines), and none ever with ``VideoSource.padded`` set, for
  models compiled with the decoder's :meth:`VideoSource.line_sizes` (``input_line_sizes``:
  the graph drops the padding). Otherwise a plane whose lines are padded (the decoder aligns
  line sizes: a 120-pixel-wide frame has 128-byte luma lines) is compacted into a new array,
  one copy of that plane; ``VideoFrame.copied`` says so.
* Pixel formats other than ``yuv420p``/``yuvj420p`` (I420) and ``nv12`` (4:2:2, 4:4:4,
  10-bit...) are converted to ``yuv420p`` by libswscale, a CPU pass per frame, logged once.
* Colours are never converted: the stream's matrix (BT.601 or BT.709) and range (limited
  or full) are reported in :class:`StreamInfo` for the compiler's ``yuv_matrix`` /
  ``yuv_range``.

Decoding runs in FFmpeg's own threads (``thread_type="AUTO"``) and releases the GIL. A frame
keeps its PyAV frame, so its memory lives as long as the planes are referenced.

Errors (:class:`VideoError`): a source that does not open, has no video track, fails to
decode, or ends early. Ending early is noticed where the container says how long the stream
is (MP4, Matroska...: the decoded timeline falls short of the declared duration) and where
packets do not decode into frames. A frame cut off mid-way (an MPEG-TS stream that ends
inside a frame) is concealed by FFmpeg, which says so only in its log: ``copyless-video``
collects those messages (an application may set PyAV's log level; this library does not).
An MPEG-TS cut exactly between two frames just ends.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..types import CopylessError

logger = logging.getLogger(__name__)

_DIRECT = {"yuv420p": ("i420", None), "yuvj420p": ("i420", "full"), "nv12": ("nv12", None)}
_LIVE_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtp", "udp", "tcp", "srt", "http", "https")
_BT709 = 1  # AVCOL_SPC_BT709
_FULL_RANGE = 2  # AVCOL_RANGE_JPEG


class VideoError(CopylessError):
    """A video source that cannot be opened, has no video track, or fails to decode."""


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What the compiler and the pipeline need to know about a video stream."""

    width: int
    height: int
    input_format: str  # "i420" or "nv12": the planes VideoFrame holds
    pixel_format: str  # the decoder's own (e.g. "yuv420p", "yuv422p10le")
    yuv_matrix: str  # "bt601" or "bt709"
    yuv_range: str  # "limited" or "full"
    codec: str
    frames: int  # declared frame count, 0 when unknown
    rate: float  # frames per second, 0.0 when unknown
    live: bool  # a camera or a network stream: frames come at the source's pace


@dataclass(frozen=True, slots=True)
class VideoFrame:
    """One decoded frame: ``planes`` are Y, U, V (I420) or Y, UV ``[H/2, W/2, 2]`` (NV12)."""

    index: int
    planes: tuple[npt.NDArray[np.uint8], ...]
    time: float | None  # presentation time in seconds
    copied: bool  # a plane had padded lines and was compacted (one copy)
    frame: Any  # the PyAV frame that owns the memory


def is_live(source: str | Path) -> bool:
    """A camera (``/dev/video*``) or a network stream (RTSP, UDP, HTTP...): a source that
    does not wait for its reader. Files and pipes (``-``, a FIFO, ``/dev/stdin``) wait for
    theirs: they are read to their end, nothing dropped."""
    text = str(source)
    scheme, sep, _ = text.partition("://")
    if sep:
        return scheme.lower() in _LIVE_SCHEMES
    if is_stdin(text):
        return False
    real = os.path.realpath(text)
    if not real.startswith("/dev/video"):
        return False
    try:
        return stat.S_ISCHR(os.stat(real).st_mode)
    except OSError:
        return True  # a camera that is gone: opening it says so


def is_stdin(source: str | Path) -> bool:
    """``-`` or FFmpeg's ``pipe:`` / ``pipe:0``: the process's standard input."""
    return str(source) in ("-", "pipe:", "pipe:0")


def import_av() -> Any:
    """The ``av`` module; VideoError naming the extra to install when PyAV is missing."""
    try:
        import av
    except ImportError:
        raise VideoError("video needs PyAV: pip install 'copyless[video]'") from None
    return av


class VideoSource:
    """An open video stream; iterate :meth:`frames`. Close it (or use ``with``) when done.

    ``threads``: FFmpeg decoding threads (0: as many as it likes). ``live``: None guesses
    from ``source`` (:func:`is_live`: cameras and network streams; files and pipes are
    read to their end); True makes any source live (frames dropped when the reader falls
    behind: a FIFO standing for a camera, say).
    ``planes``: ``"i420"`` or ``"nv12"`` to get those planes whatever the decoder
    produces (libswscale converts the layout, a CPU pass per frame, when they differ); None
    keeps the decoder's. Raises :class:`VideoError` when the source does not open or has no
    video track.
    """

    def __init__(
        self,
        source: str | Path,
        *,
        threads: int = 0,
        live: bool | None = None,
        planes: str | None = None,
    ) -> None:
        if planes not in (None, "i420", "nv12"):
            raise VideoError(f"planes must be 'i420', 'nv12' or None, got {planes!r}")
        av = import_av()
        self._av = av
        self.source = str(source)
        url = "pipe:0" if is_stdin(self.source) else self.source
        local = url == self.source and not self.source.partition("://")[1]
        if local and not Path(self.source).exists():
            raise VideoError(f"no video at {self.source}")
        fmt = "v4l2" if self.source.startswith("/dev/video") else None
        try:
            self._container = av.open(url, format=fmt, timeout=10.0)
        except (av.error.FFmpegError, OSError) as exc:
            what = "standard input" if url == "pipe:0" else self.source
            raise VideoError(f"cannot open {what}: {exc}") from exc
        self._finalizer = weakref.finalize(self, self._container.close)
        if not self._container.streams.video:
            self.close()
            raise VideoError(f"{self.source} has no video track")
        self._stream = self._container.streams.video[0]
        self._stream.thread_type = "AUTO"
        self._stream.thread_count = threads
        self.info = self._probe(is_live(source) if live is None else bool(live), planes)
        #: Yield planes with their line padding (shapes ``(rows, line_size)``): never a copy;
        #: for models compiled with :meth:`line_sizes`. Default False: compact planes.
        self.padded = False
        self._peeked: list[Any] = []
        self._decoder = self._decode()

    def _probe(self, live: bool, planes: str | None) -> StreamInfo:
        ctx = self._stream.codec_context
        pix = ctx.pix_fmt or "yuv420p"
        fmt, range_hint = _DIRECT.get(pix, ("i420", None))
        if pix not in _DIRECT:
            logger.warning("%s: pixel format %s is converted on the CPU", self.source, pix)
        fmt = planes or fmt
        full = range_hint == "full" or int(ctx.color_range or 0) == _FULL_RANGE
        rate = self._stream.average_rate
        return StreamInfo(
            width=ctx.width,
            height=ctx.height,
            input_format=fmt,
            pixel_format=pix,
            yuv_matrix="bt709" if int(ctx.colorspace or 0) == _BT709 else "bt601",
            yuv_range="full" if full else "limited",
            codec=ctx.name,
            frames=int(self._stream.frames or 0),
            rate=float(rate) if rate else 0.0,
            live=live,
        )

    def use_planes(self, planes: str) -> None:
        """Yield ``"i420"`` or ``"nv12"`` planes from now on (libswscale converts the layout,
        a CPU pass per frame, when the decoder produces the other)."""
        if planes not in ("i420", "nv12"):
            raise VideoError(f"planes must be 'i420' or 'nv12', got {planes!r}")
        self.info = dataclasses.replace(self.info, input_format=planes)

    def line_sizes(self) -> tuple[int, int]:
        """Bytes per line of the luma and chroma planes the frames will have (NV12: of the
        interleaved UV plane), read from the first frame, which is decoded now and yielded
        first by :meth:`frames`. A compiler given them (``input_line_sizes``) makes a model
        that takes the planes with their padding: set ``padded`` and no frame is copied."""
        if not self._peeked:
            first = next(self._decoder, None)
            if first is None:
                raise VideoError(f"{self.source}: no frame to decode")
            self._peeked.append(first)
        planes = self._converted(self._peeked[0]).planes
        return int(planes[0].line_size), int(planes[1].line_size)

    def frames(self, limit: int | None = None) -> Iterator[VideoFrame]:
        """Decode frames in order (at most ``limit``). Raises :class:`VideoError` when the
        stream fails to decode or ends early; frames already yielded stay valid."""
        count = 0
        while limit is None or count < limit:
            frame = self._peeked.pop(0) if self._peeked else next(self._decoder, None)
            if frame is None:
                return
            yield self._frame(count, frame)
            count += 1

    def _decode(self) -> Iterator[Any]:
        """The stream's frames as PyAV decodes them, then the end-of-stream checks."""
        av, count, packets, end = self._av, 0, 0, 0.0
        step = 1.0 / self.info.rate if self.info.rate else 0.0
        try:
            for packet in self._container.demux(self._stream):
                packets += packet.size > 0
                for frame in packet.decode():
                    yield frame
                    count += 1
                    if frame.time is not None:
                        end = max(end, float(frame.time) + _duration(frame, step))
        except (av.error.FFmpegError, OSError) as exc:
            raise VideoError(f"{self.source}: decoding failed after {count} frames: {exc}") from exc
        if not self.info.live:
            self._check_complete(count, packets, end, step)

    def _check_complete(self, count: int, packets: int, end: float, step: float) -> None:
        if count < packets:
            raise VideoError(
                f"{self.source}: {packets - count} of {packets} packets did not decode "
                f"(the stream ends mid-frame or is corrupt); {count} frames decoded"
            )
        duration = self._container.duration  # microseconds, None when not declared
        if duration is None or not step or count == 0:
            return
        start = (self._container.start_time or 0) / 1e6
        declared = start + duration / 1e6
        if end < declared - max(1.5 * step, 0.05):
            raise VideoError(
                f"{self.source}: the stream ends early: {count} frames up to {end - start:.2f} s "
                f"of the {duration / 1e6:.2f} s the container declares (truncated?)"
            )

    def _frame(self, index: int, frame: Any) -> VideoFrame:
        if (frame.width, frame.height) != (self.info.width, self.info.height):
            raise VideoError(
                f"{self.source}: frame {index} is {frame.width}x{frame.height}, the stream "
                f"started at {self.info.width}x{self.info.height} (size changes are not supported)"
            )
        frame = self._converted(frame)
        height, width = frame.height, frame.width
        ch, cw = (height + 1) // 2, (width + 1) // 2
        if self.info.input_format == "nv12":
            shapes = [(height, width, 1), (ch, cw, 2)]
        else:
            shapes = [(height, width, 1), (ch, cw, 1), (ch, cw, 1)]
        planes, copied = [], False
        for plane, (rows, cols, depth) in zip(frame.planes, shapes, strict=True):
            array, was_copied = plane_array(plane, rows, cols, depth, self.padded)
            planes.append(array)
            copied = copied or was_copied
        time = None if frame.time is None else float(frame.time)
        return VideoFrame(index, tuple(planes), time, copied, frame)

    def _converted(self, frame: Any) -> Any:
        """``frame`` in the planes of ``info.input_format`` (libswscale when it differs)."""
        if _DIRECT.get(frame.format.name, ("",))[0] == self.info.input_format:
            return frame
        return frame.reformat(format="nv12" if self.info.input_format == "nv12" else "yuv420p")

    def close(self) -> None:
        """Close the container (idempotent). Frames already decoded stay valid."""
        self._finalizer()

    def __enter__(self) -> VideoSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _duration(frame: Any, step: float) -> float:
    """The frame's own duration in seconds where the stream gives one, else ``step``."""
    duration, base = getattr(frame, "duration", None), frame.time_base  # absent in some builds
    if duration and base:
        return float(duration * base)
    return step


def plane_array(
    plane: Any, rows: int, cols: int, depth: int, padded: bool = False
) -> tuple[npt.NDArray[np.uint8], bool]:
    """A ``(rows, cols)`` (``depth`` 1) or ``(rows, cols, depth)`` uint8 array over a PyAV
    plane's memory; compacted (copied, second value True) only when its lines are padded,
    unless ``padded`` asks for the lines as they are (``cols`` is then the line size)."""
    line = int(plane.line_size)
    flat = np.frombuffer(plane, np.uint8)
    if flat.size < rows * line or line < cols * depth:
        raise VideoError(f"plane of {flat.size} bytes cannot hold {rows} lines of {line} bytes")
    if padded:
        cols = line // depth
    grid = flat[: rows * line].reshape(rows, line)[:, : cols * depth]
    copied = line != cols * depth
    if copied:
        grid = np.ascontiguousarray(grid)
    shaped = grid.reshape(rows, cols) if depth == 1 else grid.reshape(rows, cols, depth)
    return shaped, copied
