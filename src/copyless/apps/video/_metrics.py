"""copyless-video's per-stream figures in Prometheus' text format (prometheus-client, the
``video`` extra): one collector, :class:`StreamMetrics`, read by ``--metrics-port``
(:class:`MetricsServer`) and by the live page's ``/metrics`` (:mod:`._page`), so that a
name means the same wherever it is scraped.

Every scrape reads the figures of the moment (:meth:`copyless.vision.StreamSet.stats`, a
snapshot under the set's lock), labelled ``stream`` (the input's index) and ``source``
(its path or URL):

* ``copyless_video_frames_total``: frames with a result; ``copyless_video_decoded_total``;
  ``copyless_video_dropped_total``: frames a live source dropped (the model fell behind).
* ``copyless_video_fps``: results per second since the stream's first frame; 0 once it
  failed (a failed stream does not show its old rate).
* ``copyless_video_latency_seconds{quantile="0.5"|"0.99"}``: decode to result, over the
  stream's latest results (:data:`copyless.vision._streams.LATENCY_WINDOW`).
* ``copyless_video_up``: 1 while the stream runs (decodes or has frames queued), 0 once it
  ended or failed; ``copyless_video_failed``: 1 when it stopped on an error.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ...types import Address, OptionError, UnsupportedError
from ._figures import Figures, current_fps, stream_state

__all__ = ["MetricsServer", "StreamMetrics", "need_prometheus"]


def need_prometheus(what: str) -> Any:
    """The ``prometheus_client`` package (the ``video`` extra), or UnsupportedError naming
    ``what`` needs it."""
    try:
        import prometheus_client
        import prometheus_client.core
        import prometheus_client.exposition
    except ImportError:
        raise UnsupportedError(
            f"{what} needs prometheus-client: pip install 'copyless[video]'"
        ) from None
    return prometheus_client


class StreamMetrics:
    """The figures ``figures()`` returns as Prometheus metrics, in a registry of their own
    (the process's default registry is left alone). UnsupportedError without
    prometheus-client (``what`` names the option that needs it)."""

    def __init__(self, figures: Callable[[], Sequence[Figures]], what: str) -> None:
        client = need_prometheus(what)
        self.figures = figures
        self._core = client.core
        self._exposition = client.exposition
        self.registry = client.CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def collect(self) -> Iterator[Any]:
        """prometheus-client's collector hook: the families, read from one snapshot."""
        core, labels = self._core, ["stream", "source"]

        def family(kind: Any, name: str, text: str, extra: tuple[str, ...] = ()) -> Any:
            return kind(f"copyless_video_{name}", text, labels=[*labels, *extra])

        counter, gauge = core.CounterMetricFamily, core.GaugeMetricFamily
        frames = family(counter, "frames", "Frames with a result")
        decoded = family(counter, "decoded", "Frames decoded")
        dropped = family(counter, "dropped", "Frames dropped (the model could not keep up)")
        fps = family(gauge, "fps", "Results per second since the stream's first frame")
        latency = family(gauge, "latency_seconds", "Decode-to-result latency, by quantile",
                         ("quantile",))  # fmt: skip
        up = family(gauge, "up", "1 while the stream runs, 0 once it ended or failed")
        failed = family(gauge, "failed", "1 when the stream stopped on an error")
        for f in self.figures():
            names = [str(f.index), str(f.source)]
            state = stream_state(f)
            frames.add_metric(names, f.frames)
            decoded.add_metric(names, f.decoded)
            dropped.add_metric(names, f.dropped)
            fps.add_metric(names, current_fps(f))
            latency.add_metric([*names, "0.5"], f.latency_p50)
            latency.add_metric([*names, "0.99"], f.latency_p99)
            up.add_metric(names, 1.0 if state == "running" else 0.0)
            failed.add_metric(names, 1.0 if state == "failed" else 0.0)
        return iter((frames, decoded, dropped, fps, latency, up, failed))

    def render(self) -> tuple[bytes, str]:
        """The text a scrape gets, and its content type."""
        body: bytes = self._exposition.generate_latest(self.registry)
        return body, str(self._exposition.CONTENT_TYPE_LATEST)


class MetricsServer:
    """Serves ``figures()`` as :class:`StreamMetrics` at ``http://HOST:PORT/metrics`` in a
    daemon thread until :meth:`close`; says where on stderr. UnsupportedError without
    prometheus-client; OptionError when the address cannot be bound."""

    def __init__(self, figures: Callable[[], Sequence[Figures]], address: Address) -> None:
        metrics = StreamMetrics(figures, "--metrics-port")
        client = need_prometheus("--metrics-port")  # imported already: no second import
        try:
            self._server, self._thread = client.start_http_server(
                address.port, address.host, metrics.registry
            )
        except OSError as exc:
            raise OptionError(f"--metrics-port: cannot serve on {address}: {exc}") from exc
        self.port = int(self._server.server_port)
        shown = Address(address.host, self.port)
        print(f"metrics at http://{shown}/metrics", file=sys.stderr, flush=True)
        self._closed = threading.Event()

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if not self._closed.is_set():
            self._closed.set()
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
