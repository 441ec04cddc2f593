"""Many video streams feeding one model: a decoder thread per stream, per-stream metrics
and the latest annotated frame of each stream.

:class:`StreamSet` opens the sources (:class:`~copyless.vision.VideoSource`) and runs one
decoder thread per stream into a bounded per-stream queue. :meth:`StreamSet.frames` is one
stream's frames in order, a source for :meth:`copyless.Pipeline.map_sources` (which takes
the streams round robin and batches across them); :meth:`StreamSet.batches` assembles
batches itself, for a consumer without a pipeline, the way Triton's dynamic batcher and
DeepStream's stream muxer do: take what is ready (round robin over the streams, each
stream's frames in order), up to ``max_batch`` frames; when fewer are ready, wait at most
``max_wait`` seconds from the first frame of the batch for more, then go with what there is.

Flow control, per stream: a file or a pipe waits for room in its queue (nothing is lost);
a live source (camera, network stream) drops its oldest queued frame instead, counted in
that stream's ``dropped``, so a slow consumer never stalls a camera and one camera never
stalls another.
Memory is bounded by ``queue`` frames per stream (each frame holds its decoder frame).
A stream that fails (corrupt data, a size change, a cut, a disconnect) ends with its error
in :attr:`StreamStats.error`; the other streams go on.

What a consumer (an app, a web page) reads, from any thread:

* :meth:`StreamSet.stats`: a :class:`StreamStats` snapshot per stream (frames, FPS,
  decode-to-result latency p50/p99, drops, error).
* :meth:`StreamSet.latest`: the latest :class:`Annotated` frame of a stream, and
  :meth:`StreamSet.subscribe`: a callback called with each one as the app publishes it
  (:meth:`StreamSet.publish`, in each stream's frame order). ``Annotated.rgb()`` converts
  the frame to an RGB array on demand (one conversion and copy, only when called).

No copy of plane memory happens here: a queued :class:`StreamFrame` holds the decoder's
frame; the consumer binds or copies its planes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ._postprocess import Box
from ._video import VideoError, VideoFrame, VideoSource

logger = logging.getLogger(__name__)

#: Latencies kept per stream for the percentiles (the most recent ones).
LATENCY_WINDOW = 4096
#: close(): how long it waits for an inline reader to finish the frame it is decoding.
CLOSE_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class StreamFrame:
    """A decoded frame of stream ``stream``; ``decoded`` is ``time.perf_counter()`` when the
    decoder handed it over (the start of its decode-to-result latency)."""

    stream: int
    frame: VideoFrame
    decoded: float


@dataclass(frozen=True, slots=True)
class StreamStats:
    """A snapshot of one stream's counters. ``frames``: results published; ``fps``: frames
    per second since the stream's first frame; latencies in seconds, decode to result (0.0
    before the first result); ``error``: why the stream stopped early, None if it did not;
    ``finished``: it ended and every frame decoded has a result or was dropped."""

    index: int
    source: str
    decoded: int
    decode_seconds: float
    frames: int
    dropped: int
    fps: float
    latency_p50: float
    latency_p99: float
    error: str | None
    finished: bool


@dataclass(frozen=True, slots=True)
class Annotated:
    """One published result: stream ``stream``'s frame with its result ``lines`` (as
    printed), ``banner`` text and ``boxes`` (frame pixels)."""

    stream: int
    frame: VideoFrame
    lines: tuple[str, ...]
    banner: str
    boxes: tuple[Box, ...] = ()

    @property
    def index(self) -> int:
        return self.frame.index

    def rgb(self) -> npt.NDArray[np.uint8]:
        """The frame as ``[H, W, 3]`` RGB (libswscale: a conversion and a new array)."""
        array: npt.NDArray[np.uint8] = self.frame.frame.to_ndarray(format="rgb24")
        return array


Hook = Callable[[Annotated], None]


@dataclass
class _Stream:
    """One stream's source, queue and counters (guarded by the StreamSet's lock), and its
    two conditions on that lock: a frame queued or the stream ended (``ready``: what its
    :meth:`StreamSet.frames` reader waits on), a frame taken (``room``: its decoder). One
    pair per stream: a frame wakes its own reader and decoder, not every stream's."""

    index: int
    source: VideoSource
    ready: threading.Condition
    room: threading.Condition
    queue: deque[StreamFrame] = field(default_factory=deque)
    decoded: int = 0
    decode_seconds: float = 0.0
    frames: int = 0
    dropped: int = 0
    started: float = 0.0
    last: float = 0.0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    error: str | None = None
    ended: bool = False  # the decoder thread is done (end, error or stop)
    latest: Annotated | None = None
    inline: bool = False  # no decoder thread: frames() decodes in its reader's thread
    decoding: bool = False  # a thread is inside the decoder (close waits for it)
    reading: bool = False  # an inline stream's frames() has begun


class StreamSet:
    """Video sources decoded side by side, assembled into batches for one model.

    ``sources``: paths or URLs (stream ``i`` is ``sources[i]``); ``queue``: frames queued per
    stream; ``threads``, ``live``, ``planes``: as :class:`VideoSource` (``live`` may also be
    a sequence: one value per source); ``max_frames``: stop each stream after that many
    frames. Raises :class:`VideoError` when a source does not
    open (the ones opened are closed). Call :meth:`start` once the sources are set up
    (``use_planes``, ``padded``), then iterate :meth:`frames` of each stream (or
    :meth:`batches`); close it (or ``with``).
    """

    def __init__(
        self,
        sources: Sequence[str | Path],
        *,
        queue: int = 4,
        threads: int = 0,
        live: bool | Sequence[bool | None] | None = None,
        max_frames: int | None = None,
    ) -> None:
        if not sources:
            raise VideoError("no video source given")
        if queue < 1:
            raise VideoError(f"queue must be >= 1, got {queue}")
        lives = list(live) if isinstance(live, Sequence) else [live] * len(sources)
        if len(lives) != len(sources):
            raise VideoError(f"live: {len(lives)} values for {len(sources)} sources")
        opened: list[VideoSource] = []
        try:
            for source, source_live in zip(sources, lives, strict=True):
                opened.append(VideoSource(source, threads=threads, live=source_live))
        except VideoError:
            for done in opened:
                done.close()
            raise
        self.sources = opened
        self.queue = queue
        self.max_frames = max_frames
        self._lock = threading.Lock()
        self._streams = [
            _Stream(i, s, threading.Condition(self._lock), threading.Condition(self._lock))
            for i, s in enumerate(opened)
        ]
        # any stream's frame queued or a stream ended: what :meth:`batches` waits on
        self._ready = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._hooks: list[Hook] = []
        self._next = 0  # the stream the next batch starts with (round robin)

    def __len__(self) -> int:
        return len(self._streams)

    def start(self, *, inline: bool = False) -> None:
        """Start the decoder threads (once). ``inline``: a stream that is not live gets no
        thread of its own: :meth:`frames` decodes it in the thread that iterates it (a
        :meth:`copyless.Pipeline.map_sources` reader already is one), a thread and a
        hand-over fewer per frame; :meth:`batches` then refuses. A live stream keeps its
        thread either way (it drops the oldest frame while the consumer is behind)."""
        if self._threads or any(s.inline for s in self._streams):
            raise VideoError("the streams are already started")
        for stream in self._streams:
            if inline and not stream.source.info.live:
                stream.inline = True
                continue
            thread = threading.Thread(
                target=self._decode, args=(stream,), name=f"copyless-stream-{stream.index}",
                daemon=True,
            )  # fmt: skip
            self._threads.append(thread)
            thread.start()

    def _decode(self, stream: _Stream) -> None:
        """A decoder thread: the stream's frames into its queue."""
        live = stream.source.info.live
        with contextlib.closing(self._decoded(stream)) as items:  # ended, however it ends
            for item in items:
                if not self._put(stream, item, live):
                    break

    def _decoded(self, stream: _Stream) -> Generator[StreamFrame, None, None]:
        """The stream's frames as they are decoded (in the calling thread: a decoder
        thread, or an inline stream's reader), counted; a failure is recorded as the
        stream's and ends it; the stream is marked ended however this ends."""
        frames = stream.source.frames(self.max_frames)
        try:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                with self._lock:
                    stream.decoding = True
                try:
                    frame = next(frames, None)
                finally:
                    with self._lock:
                        stream.decoding = False
                        stream.room.notify_all()  # close() may be waiting for this
                if frame is None:
                    return
                item = StreamFrame(stream.index, frame, time.perf_counter())
                with self._lock:
                    if not stream.decoded:
                        stream.started = item.decoded
                    stream.decoded += 1
                    stream.decode_seconds += item.decoded - t0
                if self._stop.is_set():
                    return
                yield item
        except VideoError as exc:
            self._fail(stream, str(exc))
        except Exception as exc:  # noqa: BLE001 - reported as this stream's failure
            self._fail(stream, f"the decoder failed: {exc!r}")
        finally:
            with self._lock:
                stream.ended = True
                stream.ready.notify_all()
                self._ready.notify_all()

    def _put(self, stream: _Stream, item: StreamFrame, live: bool) -> bool:
        """Queue ``item``; False once the set is stopping."""
        with self._lock:
            while len(stream.queue) >= self.queue:
                if self._stop.is_set():
                    return False
                if live:
                    stream.queue.popleft()
                    stream.dropped += 1
                    break
                stream.room.wait(0.1)
            if self._stop.is_set():
                return False
            stream.queue.append(item)
            stream.ready.notify_all()  # its reader (frames)
            self._ready.notify_all()  # a batches consumer
            return True

    def _fail(self, stream: _Stream, message: str) -> None:
        logger.warning("stream %d (%s): %s", stream.index, stream.source.source, message)
        with self._lock:
            stream.error = message

    def batches(
        self, max_batch: int = 1, max_wait: float = 0.0, idle: float | None = None
    ) -> Iterator[list[StreamFrame]]:
        """Batches of ready frames until every stream has ended (or :meth:`close`): up to
        ``max_batch`` frames, round robin over the streams, each stream's frames in order;
        when fewer are ready, wait up to ``max_wait`` seconds from the first for more.
        With ``idle``, an empty batch when no frame came for that long (a paused camera):
        the consumer's cue to collect the results still in flight."""
        if max_batch < 1 or max_wait < 0:
            raise VideoError(f"max_batch must be >= 1 and max_wait >= 0: {max_batch}, {max_wait}")
        if any(s.inline for s in self._streams):
            raise VideoError("batches() needs the decoder threads: start() without inline")
        while True:
            batch = self._assemble(max_batch, max_wait, idle)
            if batch is None:
                return
            yield batch

    def _assemble(
        self, max_batch: int, max_wait: float, idle: float | None
    ) -> list[StreamFrame] | None:
        batch: list[StreamFrame] = []
        now = time.perf_counter()
        deadline, idle_until = None, None if idle is None else now + idle
        with self._lock:
            while not self._stop.is_set():
                self._take(batch, max_batch)
                if len(batch) >= max_batch:
                    break
                if all(s.ended and not s.queue for s in self._streams):
                    break
                now = time.perf_counter()
                if batch and deadline is None:
                    deadline = now + max_wait
                until = deadline if batch else idle_until
                if until is not None and until <= now:
                    break
                self._ready.wait(0.1 if until is None else until - now)
            for stream in self._streams:
                stream.room.notify_all()
            if not batch and (
                self._stop.is_set()
                or idle_until is None
                or all(s.ended and not s.queue for s in self._streams)
            ):
                return None
        return batch

    def frames(self, stream: int) -> Iterator[StreamFrame]:
        """Stream ``stream``'s frames in order, as its decoder queues them, until it ends or
        the set stops: one source of :meth:`copyless.Pipeline.map_sources`. Waits while the
        queue is empty; taking a frame makes room for the decoder. No copy: the frame holds
        the decoder's memory. A stream started ``inline`` is decoded here, in the caller's
        thread, one frame per step."""
        state = self._streams[stream]
        if state.inline:
            yield from self._decode_inline(state)
            return
        while True:
            with self._lock:
                while not state.queue and not state.ended and not self._stop.is_set():
                    state.ready.wait(0.1)
                if self._stop.is_set() or not state.queue:
                    return
                item = state.queue.popleft()
                state.room.notify_all()
            yield item

    def _decode_inline(self, stream: _Stream) -> Iterator[StreamFrame]:
        """:meth:`frames` of an ``inline`` stream: :meth:`_decoded` in the caller's thread."""
        with self._lock:
            if stream.decoding or stream.ended or stream.reading:
                raise VideoError(f"stream {stream.index} is already being read")
            stream.reading = True
        yield from self._decoded(stream)

    def _take(self, batch: list[StreamFrame], max_batch: int) -> None:
        """Move ready frames into ``batch``, one stream after the other (round robin, going
        on from where the last batch stopped)."""
        count, idle = len(self._streams), 0
        while len(batch) < max_batch and idle < count:
            stream = self._streams[self._next]
            self._next = (self._next + 1) % count
            if stream.queue:
                batch.append(stream.queue.popleft())
                idle = 0
            else:
                idle += 1

    def publish(self, result: Annotated, decoded: float) -> None:
        """Record ``result`` as its stream's latest, its latency (``decoded``: the
        :attr:`StreamFrame.decoded` of its frame, to now), and call the subscribed hooks
        with it. Call it in each stream's frame order."""
        at = time.perf_counter()
        stream = self._streams[result.stream]
        with self._lock:
            stream.frames += 1
            stream.last = at
            stream.latest = result
            stream.latencies.append(at - decoded)
            hooks = list(self._hooks)
        for hook in hooks:
            hook(result)

    def subscribe(self, hook: Hook) -> None:
        """Call ``hook(annotated)`` for every published frame (in the publishing thread:
        keep it short; copy what it keeps beyond the call, e.g. ``annotated.rgb()``)."""
        with self._lock:
            self._hooks.append(hook)

    def latest(self, stream: int) -> Annotated | None:
        """The latest published frame of ``stream`` (None before the first)."""
        with self._lock:
            return self._streams[stream].latest

    def stats(self) -> list[StreamStats]:
        """A :class:`StreamStats` snapshot per stream, in stream order."""
        with self._lock:
            return [_snapshot(s) for s in self._streams]

    def stop(self) -> None:
        """Stop decoding: the decoder threads end, :meth:`frames` and :meth:`batches` end
        within 0.1 s and the queued frames are not handed out. Takes no lock, so a signal
        handler may call it; :meth:`close` still closes the sources."""
        self._stop.set()

    def close(self) -> None:
        """Stop the decoder threads, drop the queued frames, close the sources."""
        self.stop()
        with self._lock:
            for stream in self._streams:
                stream.room.notify_all()
                stream.ready.notify_all()
            self._ready.notify_all()
        for thread in self._threads:
            thread.join()
        deadline = time.perf_counter() + CLOSE_WAIT_S
        with self._lock:
            for stream in self._streams:
                stream.queue.clear()
                # an inline reader inside the decoder: its frame first, then the source
                while stream.decoding and time.perf_counter() < deadline:
                    stream.room.wait(0.1)
        for source in self.sources:
            source.close()

    def __enter__(self) -> StreamSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _snapshot(stream: _Stream) -> StreamStats:
    latencies = np.fromiter(stream.latencies, np.float64, len(stream.latencies))
    p50, p99 = (float(v) for v in np.percentile(latencies, (50, 99))) if latencies.size \
        else (0.0, 0.0)  # fmt: skip
    span = stream.last - stream.started
    return StreamStats(
        index=stream.index,
        source=stream.source.source,
        decoded=stream.decoded,
        decode_seconds=stream.decode_seconds,
        frames=stream.frames,
        dropped=stream.dropped,
        fps=stream.frames / span if span > 0 else 0.0,
        latency_p50=p50,
        latency_p99=p99,
        error=stream.error,
        finished=stream.ended and stream.frames + stream.dropped >= stream.decoded,
    )
