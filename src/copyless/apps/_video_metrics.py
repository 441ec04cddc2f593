"""copyless-video's per-stream metrics: the closing block's lines and, with
``--metrics-port``, the same live in Prometheus' text format (prometheus-client, the
``video`` extra).

Every scrape reads :meth:`copyless.vision.StreamSet.stats` (a snapshot under the set's lock),
so the numbers are those of the moment, labelled ``stream`` (the input's index) and
``source`` (its path or URL):

* ``copyless_video_frames_total``: frames with a result; ``copyless_video_decoded_total``;
  ``copyless_video_dropped_total``: frames a live source dropped (the model fell behind).
* ``copyless_video_fps``: results per second since the stream's first frame; 0 once it
  failed (a failed stream does not show its old rate).
* ``copyless_video_latency_seconds{quantile="0.5"|"0.99"}``: decode to result, over the
  stream's latest results (:data:`copyless.vision._streams.LATENCY_WINDOW`).
* ``copyless_video_up``: 1 while the stream decodes or has frames queued, 0 once it ended;
  ``copyless_video_failed``: 1 when it stopped on an error.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

from ..vision import StreamSet, StreamStats, VideoError


def stream_lines(stats: list[StreamStats]) -> list[str]:
    """One closing line per stream: frames, FPS, latency p50/p99, drops, its error."""
    lines = []
    for s in stats:
        line = (
            f"stream {s.index}: {s.frames} frames, {s.fps:.1f} FPS, latency p50 "
            f"{s.latency_p50 * 1000.0:.1f} ms p99 {s.latency_p99 * 1000.0:.1f} ms, "
            f"dropped {s.dropped}"
        )
        lines.append(line + (" (failed)" if s.error is not None else ""))
    return lines


def parse_address(text: str) -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` -> ``(host, port)``, host 127.0.0.1 by default;
    ValueError for anything else."""
    host, _, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--metrics-port wants PORT or HOST:PORT, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"--metrics-port: port {number} is not in 0..65535")
    return host.strip("[]") or "127.0.0.1", number


class _Collector:
    """A prometheus-client collector over a StreamSet's snapshots."""

    def __init__(self, streams: StreamSet) -> None:
        self.streams = streams

    def collect(self) -> Iterator[object]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["stream", "source"]
        frames = CounterMetricFamily("copyless_video_frames", "frames with a result", labels=labels)
        decoded = CounterMetricFamily("copyless_video_decoded", "frames decoded", labels=labels)
        dropped = CounterMetricFamily(
            "copyless_video_dropped", "frames a live source dropped", labels=labels
        )
        fps = GaugeMetricFamily("copyless_video_fps", "results per second", labels=labels)
        latency = GaugeMetricFamily(
            "copyless_video_latency_seconds", "decode to result", labels=[*labels, "quantile"]
        )
        up = GaugeMetricFamily("copyless_video_up", "1 while the stream runs", labels=labels)
        failed = GaugeMetricFamily("copyless_video_failed", "1 after an error", labels=labels)
        for s in self.streams.stats():
            key = [str(s.index), s.source]
            frames.add_metric(key, s.frames)
            decoded.add_metric(key, s.decoded)
            dropped.add_metric(key, s.dropped)
            fps.add_metric(key, s.fps if s.error is None else 0.0)
            latency.add_metric([*key, "0.5"], s.latency_p50)
            latency.add_metric([*key, "0.99"], s.latency_p99)
            up.add_metric(key, 0.0 if s.finished else 1.0)
            failed.add_metric(key, 1.0 if s.error is not None else 0.0)
        yield from (frames, decoded, dropped, fps, latency, up, failed)


class MetricsServer:
    """Serves ``streams``' metrics at ``http://HOST:PORT/metrics`` in a daemon thread until
    :meth:`close`; says where on stderr. VideoError when prometheus-client is missing or
    the address cannot be bound."""

    def __init__(self, streams: StreamSet, address: tuple[str, int]) -> None:
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            raise VideoError("--metrics-port needs prometheus-client: "
                             "pip install 'copyless[video]'") from None  # fmt: skip
        registry = CollectorRegistry(auto_describe=True)
        registry.register(_Collector(streams))  # type: ignore[arg-type]
        host, port = address
        try:
            self._server, self._thread = start_http_server(port, host, registry)
        except OSError as exc:
            raise VideoError(f"--metrics-port: cannot serve on {host}:{port}: {exc}") from exc
        self.port = int(self._server.server_port)
        print(f"metrics at http://{host}:{self.port}/metrics", file=sys.stderr, flush=True)
        self._closed = threading.Event()

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if not self._closed.is_set():
            self._closed.set()
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
