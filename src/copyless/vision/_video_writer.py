"""Annotated video output: every input frame, with a text banner, encoded with PyAV.

The banner is drawn on the YUV planes (white text on a black band: luma only, chroma set to
neutral), so no frame is converted to RGB. Each output frame is a new ``yuv420p`` frame: one
copy of the decoded planes (decoder frames may still be reference frames, so they are never
drawn on in place).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._extra import need
from ._masks import paint_mask_yuv
from ._postprocess import Box
from ._video import VideoError, VideoFrame, import_av

_CODECS = ("libx264", "h264", "mpeg4")


class VideoWriter:
    """Encodes annotated frames to ``path`` (H.264 where FFmpeg has an encoder, else MPEG-4
    Part 2). ``close()`` flushes the encoder and finishes the file; use ``with``.

    4:2:0 encoders need even sides: a frame of odd width or height loses its last column or
    row in the output."""

    def __init__(self, path: str | Path, width: int, height: int, rate: float) -> None:
        av = import_av()
        width, height = width & ~1, height & ~1
        if width < 2 or height < 2:
            raise VideoError(f"cannot encode frames of {width}x{height}")
        self.path = Path(path)
        try:
            self._container = av.open(str(self.path), "w")
        except (av.error.FFmpegError, OSError, ValueError) as exc:  # ValueError: no format
            raise VideoError(f"cannot write {self.path}: {exc}") from exc
        self._finalizer = weakref.finalize(self, self._container.close)
        self._stream = _add_stream(self._container, round(rate) or 25)
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = "yuv420p"
        self._av = av
        self._band = max(12, height // 12) & ~1
        self._font = _font(self._band * 3 // 4)
        self.frames = 0

    def write(self, frame: VideoFrame, text: str, boxes: Sequence[Box] = (),
              mask: npt.NDArray[Any] | None = None) -> None:  # fmt: skip
        """Encode ``frame`` with ``text`` in a band across its top, ``boxes`` (frame
        pixels) outlined in white and ``mask`` (a segmenter's label map, the frame's or the
        model's size) painted half over it as :func:`~copyless.vision.draw_mask` paints."""
        out = self._av.VideoFrame(self._stream.width, self._stream.height, "yuv420p")
        y, u, v = (_plane_view(p) for p in out.planes)
        rows, cols = y.shape
        y[:] = frame.planes[0][:rows, :cols]
        chroma = (slice(rows // 2), slice(cols // 2))
        if len(frame.planes) == 3:
            u[:], v[:] = frame.planes[1][chroma], frame.planes[2][chroma]
        else:  # NV12: deinterleave UV
            u[:], v[:] = frame.planes[1][(*chroma, 0)], frame.planes[1][(*chroma, 1)]
        if mask is not None:
            paint_mask_yuv(y, u, v, mask)
        for box in boxes:
            _outline(y, box)
        self._banner(y, u, v, text)
        out.pts = self.frames
        try:
            for packet in self._stream.encode(out):
                self._container.mux(packet)
        except (self._av.error.FFmpegError, OSError) as exc:
            raise VideoError(f"writing {self.path} failed at frame {self.frames}: {exc}") from exc
        self.frames += 1

    def _banner(self, y: Any, u: Any, v: Any, text: str) -> None:
        band = min(self._band, y.shape[0])
        canvas = need("PIL.Image").new("L", (y.shape[1], band), 16)
        need("PIL.ImageDraw").Draw(canvas).text((4, band // 8), text, fill=235, font=self._font)
        y[:band] = np.asarray(canvas)
        u[: band // 2] = 128
        v[: band // 2] = 128

    def close(self) -> None:
        """Flush the encoder and close the file (idempotent)."""
        if self._finalizer.alive:
            try:
                for packet in self._stream.encode():
                    self._container.mux(packet)
            except (self._av.error.FFmpegError, OSError) as exc:
                # FFmpeg opens the file on the first packet: a bad path shows up only here
                raise VideoError(f"cannot write {self.path}: {exc}") from exc
            finally:
                self._finalizer()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _outline(y: npt.NDArray[np.uint8], box: Box, width: int = 2) -> None:
    """A white rectangle on the luma plane, clipped to it."""
    rows, cols = y.shape
    x0, x1 = max(0, int(box.x0)), min(cols, int(np.ceil(box.x1)))
    y0, y1 = max(0, int(box.y0)), min(rows, int(np.ceil(box.y1)))
    if x1 <= x0 or y1 <= y0:
        return
    y[y0 : min(y1, y0 + width), x0:x1] = 235
    y[max(y0, y1 - width) : y1, x0:x1] = 235
    y[y0:y1, x0 : min(x1, x0 + width)] = 235
    y[y0:y1, max(x0, x1 - width) : x1] = 235


def _add_stream(container: Any, rate: int) -> Any:
    for codec in _CODECS:
        try:
            return container.add_stream(codec, rate=rate)
        except (ValueError, LookupError):
            continue
    raise VideoError("FFmpeg has no H.264 or MPEG-4 encoder")


def _plane_view(plane: Any) -> npt.NDArray[np.uint8]:
    """A writable (height, width) view of a fresh frame's plane (lines may be padded)."""
    rows = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)
    return rows[: plane.height, : plane.width]


def _font(size: int) -> Any:
    fonts = need("PIL.ImageFont")  # Pillow: the "vision" extra
    try:
        return fonts.load_default(size=max(8, size))
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return fonts.load_default()
