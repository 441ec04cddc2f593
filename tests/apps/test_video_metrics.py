"""copyless-video's one metrics collector: ``--metrics-port`` and the live page's
``/metrics`` give the same names with the same meanings for the same figures."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from board_helpers import Figures
from copyless.apps.video._board import FrameBoard
from copyless.apps.video._metrics import MetricsServer, StreamMetrics
from copyless.apps.video._page import BoardServer
from copyless.types import Address

# running; ended; failed while frames were still queued (not finished)
FIGURES = [
    Figures(0, "a.mp4", 10, 1, 25.0, 0.01, 0.02, decoded=11),
    Figures(1, "b.mp4", 20, 0, 30.0, 0.01, 0.03, finished=True, decoded=20),
    Figures(2, "c.mp4", 5, 0, 12.0, 0.02, 0.04, error="cut", decoded=7),
]


def _samples(text: str) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels["stream"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if "quantile" not in s.labels}  # fmt: skip


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return str(reply.read().decode())


def test_one_meaning_per_name() -> None:
    body, content_type = StreamMetrics(lambda: FIGURES, "test").render()
    got = _samples(body.decode())
    assert content_type.startswith("text/plain")
    assert [got[("copyless_video_up", s)] for s in "012"] == [1.0, 0.0, 0.0]
    assert [got[("copyless_video_failed", s)] for s in "012"] == [0.0, 0.0, 1.0]
    assert [got[("copyless_video_fps", s)] for s in "012"] == [25.0, 30.0, 0.0]
    assert [got[("copyless_video_decoded_total", s)] for s in "012"] == [11.0, 20.0, 7.0]
    assert [got[("copyless_video_frames_total", s)] for s in "012"] == [10.0, 20.0, 5.0]
    assert [got[("copyless_video_dropped_total", s)] for s in "012"] == [1.0, 0.0, 0.0]


def test_metrics_port_and_the_page_serve_the_same_text() -> None:
    server = MetricsServer(lambda: FIGURES, Address("127.0.0.1", 0))
    try:
        scraped = _get(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        server.close()
    with FrameBoard([f.source for f in FIGURES], lambda: FIGURES) as board, \
            BoardServer(board, "127.0.0.1", 0) as page:  # fmt: skip
        page.start()
        shown = _get(page.url + "metrics")
    assert _samples(scraped) == _samples(shown)
    assert len(_samples(shown)) == 3 * 6  # six families by stream, the latency apart
