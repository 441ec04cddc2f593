"""The frame board: each stream's latest annotated frame and figures, for a web page.

The inference side calls :meth:`FrameBoard.publish` with each result: it only stores a
reference to the result (no conversion, no copy, no encoding) and returns. A JPEG of a
stream's latest frame is made by the board's own encoder thread, and only while a client
watches that stream (:meth:`FrameBoard.watch`), at most ``rate`` times a second per stream:
the frame converted to RGB (one conversion and a new array, ``result.rgb()``), its banner and
boxes drawn, the array shrunk to ``max_width`` when wider, then JPEG-encoded (simplejpeg).
While results keep coming, the encoder also keeps to a CPU budget: its JPEGs take at most
``cpu_share`` of the CPU time the whole process has used since the board opened (a stream's
turn is put off by one interval while over it); once a stream's results stop (the input
ended), its final frame is encoded whenever a watcher needs it.

Each stream keeps one JPEG, the latest; a watcher waits for a newer one than it last took
and gets that one, skipping any made in between. A slow client thus holds at most one JPEG
and never makes the board queue frames, and a client that never reads holds nothing more.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ...types import UnsupportedError
from ...vision import Box
from ._figures import Figures

logger = logging.getLogger(__name__)

#: Seconds without a new result after which a stream counts as idle (its input ended or
#: paused): its frames are encoded outside the CPU budget, as nothing else is running.
_IDLE = 1.0


class Published(Protocol):
    """A result the board shows: stream ``stream``'s frame (``rgb()`` converts it, called
    only off the inference thread), a ``banner`` line and ``boxes`` in frame pixels."""

    @property
    def stream(self) -> int: ...
    @property
    def banner(self) -> str: ...
    @property
    def boxes(self) -> tuple[Box, ...]: ...
    def rgb(self) -> npt.NDArray[np.uint8]: ...


@dataclass
class _Tile:
    """One stream's latest result and latest JPEG (guarded by the board's lock)."""

    name: str
    latest: Published | None = None
    published: int = 0  # results published so far
    jpeg: bytes = b""
    encoded: int = 0  # the ``published`` count of the result in ``jpeg``
    jpegs: int = 0  # JPEGs made so far (a watcher waits for this to pass what it took)
    due: float = 0.0  # the encoder's next allowed time for this stream
    published_at: float = 0.0  # time.monotonic() of the latest result
    watchers: int = 0


class FrameBoard:
    """The latest result and JPEG of each of ``names`` streams (indices 0..n-1).

    ``figures``: called (from a server thread, about once a second per page) for each
    stream's :class:`Figures`; ``rate``: JPEGs per second per watched stream at most;
    ``max_width``: wider frames are shrunk for the page; ``cpu_share``: the encoder's CPU
    budget while results come (see the module's docstring). ``close()`` stops the encoder
    thread and wakes every watcher; use ``with``.
    """

    def __init__(
        self,
        names: Sequence[str],
        figures: Callable[[], Sequence[Figures]],
        rate: float = 5.0,
        max_width: int = 640,
        quality: int = 80,
        cpu_share: float = 0.02,
    ) -> None:
        if not names:
            raise ValueError("a frame board needs at least one stream")
        if rate <= 0:
            raise ValueError(f"rate must be > 0, not {rate}")
        self.names = tuple(names)
        self.figures = figures
        self.interval, self.max_width, self.quality = 1.0 / rate, max_width, quality
        self.cpu_share = cpu_share
        self._cpu_start = time.process_time()
        self.encodes = 0  # JPEGs made, all streams (for tests and the benchmark)
        self.encode_seconds = 0.0  # CPU time the encoder thread spent making them
        self._tiles = [_Tile(name) for name in self.names]
        # One lock, two conditions: publishing wakes only the encoder (``_work``), a new
        # JPEG wakes the watchers (``_fresh``), so a result costs the publisher no wake-ups
        # of client threads.
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._fresh = threading.Condition(self._lock)
        self._closed = False
        self._jpeg = need("simplejpeg")
        self._draw = _Drawing()
        self._thread = threading.Thread(target=self._encode_loop, name="copyless-board-jpeg",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def __len__(self) -> int:
        return len(self._tiles)

    @property
    def closed(self) -> bool:
        return self._closed

    def publish(self, result: Published) -> None:
        """Make ``result`` its stream's latest (a reference is kept: no copy, no encoding
        here); the encoder thread is woken only when someone watches that stream."""
        with self._lock:
            tile = self._tiles[result.stream]
            tile.latest = result
            tile.published += 1
            tile.published_at = time.monotonic()
            if tile.watchers:
                self._work.notify()

    @contextmanager
    def watch(self, stream: int) -> Iterator[Callable[[float], bytes | None]]:
        """While the block runs, ``stream`` is watched (its frames are encoded); the block
        gets ``next_jpeg(timeout)``: a JPEG newer than the one it returned last (the first
        call: the latest there is), or None after ``timeout`` seconds with nothing newer or
        once the board is closed. IndexError for a stream the board does not have."""
        tile = self._tiles[stream]
        taken = -1

        def next_jpeg(timeout: float) -> bytes | None:
            nonlocal taken
            deadline = time.monotonic() + timeout
            with self._lock:
                while not self._closed and (tile.jpegs <= taken or not tile.jpeg):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    self._fresh.wait(left)
                if self._closed:
                    return None
                taken = tile.jpegs
                return tile.jpeg

        with self._lock:
            tile.watchers += 1
            self._work.notify()
        try:
            yield next_jpeg
        finally:
            with self._lock:
                tile.watchers -= 1

    def snapshot(self, stream: int, timeout: float) -> bytes | None:
        """A JPEG of ``stream``'s latest result (encoded for this call when no JPEG of it
        exists yet, waiting at most ``timeout`` seconds), or None when the stream has no
        result yet or the board is closed. IndexError for a stream the board does not have."""
        tile = self._tiles[stream]
        deadline = time.monotonic() + timeout
        with self.watch(stream), self._lock:
            wanted = tile.published
            while not self._closed and tile.encoded < wanted:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._fresh.wait(left)
            return tile.jpeg or None if not self._closed else None

    def close(self) -> None:
        """Stop the encoder thread and wake every watcher (idempotent)."""
        with self._lock:
            self._closed = True
            self._work.notify_all()
            self._fresh.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> FrameBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _encode_loop(self) -> None:
        while True:
            with self._lock:
                job = self._next_job()
                while job is None:
                    if self._closed:
                        return
                    self._work.wait(self._wait_time())
                    job = self._next_job()
                if self._closed:
                    return
            tile, result, count = job
            cpu = time.thread_time()
            try:
                jpeg = self._encode(result)
            except Exception:  # a frame the page cannot show must not end the board
                logger.exception("encoding stream %s's frame for the page failed", tile.name)
                jpeg = b""
            cpu = time.thread_time() - cpu
            with self._lock:
                self.encode_seconds += cpu
                tile.encoded = count
                tile.due = time.monotonic() + self.interval
                if jpeg:
                    tile.jpeg, tile.jpegs = jpeg, tile.jpegs + 1
                    self.encodes += 1
                self._fresh.notify_all()

    def _next_job(self) -> tuple[_Tile, Published, int] | None:
        """The watched stream with a result not encoded yet whose turn has come (the one
        waiting longest first), with that result; None when there is none."""
        clock = time.monotonic()
        ready = [(t.due, i, t, t.latest) for i, t in enumerate(self._tiles)
                 if t.watchers and t.published > t.encoded and t.due <= clock]  # fmt: skip
        if ready and self._over_budget():
            for _, _, tile, _ in ready:
                if tile.jpegs and clock - tile.published_at < _IDLE:  # results keep coming
                    tile.due = clock + self.interval
            ready = [r for r in ready if r[2].due <= clock]
        for _, _, tile, latest in sorted(ready, key=lambda r: r[:2]):
            if latest is not None:
                return tile, latest, tile.published
        return None

    def _over_budget(self) -> bool:
        """The JPEGs have taken more than ``cpu_share`` of the process's CPU time."""
        return self.encode_seconds > self.cpu_share * (time.process_time() - self._cpu_start)

    def _wait_time(self) -> float | None:
        """Seconds until a pending stream's turn comes, None to wait for a notification."""
        pending = [t.due for t in self._tiles if t.watchers and t.published > t.encoded]
        return max(0.0, min(pending) - time.monotonic()) if pending else None

    def _encode(self, result: Published) -> bytes:
        """``result`` drawn and JPEG-encoded (runs on the encoder thread)."""
        image = self._draw(result, self.max_width)
        jpeg: bytes = self._jpeg.encode_jpeg(image, quality=self.quality, colorspace="RGB")
        return jpeg


class _Drawing:
    """Draws a result's banner and boxes on its RGB frame, shrunk to a width (Pillow)."""

    def __init__(self) -> None:
        self._image = need("PIL.Image")
        self._draw = need("PIL.ImageDraw")
        self._fonts: dict[int, Any] = {}

    def __call__(self, result: Published, max_width: int) -> npt.NDArray[np.uint8]:
        image = self._image.fromarray(result.rgb())
        scale = min(1.0, max_width / image.width)
        if scale < 1.0:
            size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
            image = image.resize(size, self._image.Resampling.BILINEAR)
        draw = self._draw.Draw(image)
        for box in result.boxes:
            xy = [box.x0 * scale, box.y0 * scale, box.x1 * scale, box.y1 * scale]
            draw.rectangle(xy, outline=(0, 255, 0), width=2)
        band = max(14, image.height // 12)
        draw.rectangle([0, 0, image.width, band], fill=(0, 0, 0))
        draw.text((4, band // 8), result.banner, fill=(255, 255, 255), font=self._font(band))
        return np.asarray(image)

    def _font(self, band: int) -> Any:
        size = max(8, band * 3 // 4)
        if size not in self._fonts:
            fonts = need("PIL.ImageFont")
            try:
                self._fonts[size] = fonts.load_default(size=size)
            except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
                self._fonts[size] = fonts.load_default()
        return self._fonts[size]


def need(module: str) -> Any:
    """Import ``module`` (Pillow's or simplejpeg's: the ``vision`` extra), or
    UnsupportedError saying what to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UnsupportedError(
            f"the live page needs {module.split('.')[0]}: pip install 'copyless[video]'"
        ) from None
