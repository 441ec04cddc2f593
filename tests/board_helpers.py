"""Figures for a frame board fed by a test instead of copyless-video's StreamSet: a meter of
one stream's results, drops and latencies (imported by basename, like the other helpers)."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Figures:
    """What the board reads of a stream (the fields of copyless.vision.StreamStats it uses)."""

    index: int
    source: str
    frames: int
    dropped: int
    fps: float
    latency_p50: float
    latency_p99: float
    error: str | None = None
    finished: bool = False
    decoded: int = 0


@dataclass
class StreamMeter:
    """Counts one stream's results, drops and decode-to-result latencies (thread-safe)."""

    index: int
    source: str
    frames: int = 0
    dropped: int = 0
    started: float = 0.0
    last: float = 0.0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, decoded: float, done: float) -> None:
        with self.lock:
            if not self.frames:
                self.started = decoded
            self.frames += 1
            self.last = done
            self.latencies.append(done - decoded)

    def drop(self, count: int = 1) -> None:
        with self.lock:
            self.dropped += count

    def figures(self) -> Figures:
        with self.lock:
            lat = np.fromiter(self.latencies, np.float64, len(self.latencies))
            wall = self.last - self.started
            fps = self.frames / wall if wall > 0 else 0.0
            p50, p99 = (float(q) for q in np.percentile(lat, (50, 99))) if lat.size else (0, 0)
            return Figures(self.index, self.source, self.frames, self.dropped, fps, p50, p99,
                           decoded=self.frames + self.dropped)
