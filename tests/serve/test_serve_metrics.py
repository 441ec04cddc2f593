"""copyless-serve's Prometheus page: Triton's counters and summaries (latency quantiles per
stage), the request-duration and request-size histograms, all parsed by Prometheus' own text
parser, as a scraper and Grafana read them."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families
from serve_helpers import conv_rows

from copyless.serve import InferenceServer


def _scrape(server: InferenceServer) -> dict[str, object]:
    text = urllib.request.urlopen(f"http://{server.url('metrics')}/metrics").read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def _settled(server: InferenceServer, done: Callable[[dict[str, object]], bool],
             seconds: float = 5.0) -> dict[str, object]:
    """The page once ``done`` holds: a request is counted before its answer leaves, its
    rows' stage timings right after (the consumer records them once the row's last stage
    returns, as Triton updates its statistics when a request is released)."""
    end = time.monotonic() + seconds
    while True:
        families = _scrape(server)
        if done(families) or time.monotonic() > end:
            return families
        time.sleep(0.02)


def _success(families: dict[str, object]) -> float:
    family = families.get("nv_inference_request_success")
    return sum(s.value for s in family.samples  # type: ignore[attr-defined]
               if s.labels.get("model") == "conv") if family is not None else 0.0  # fmt: skip


def test_latency_summaries_histograms_and_sizes(server: InferenceServer) -> None:
    before = _scrape(server)

    def count(families: dict[str, object], name: str) -> float:
        family = families.get(name)
        if family is None:
            return 0.0
        return sum(s.value for s in family.samples  # type: ignore[attr-defined]
                   if s.name == f"{name}_count" and s.labels.get("model") == "conv")

    client = grpcclient.InferenceServerClient(server.url("grpc"))
    x = conv_rows(1, seed=4)
    for _ in range(20):
        given = grpcclient.InferInput("input", list(x.shape), "FP32")
        given.set_data_from_numpy(x)
        client.infer("conv", [given])
    assert _success(_scrape(server)) - _success(before) == 20  # counted before answered
    families = _settled(server, lambda page: all(
        count(page, f"nv_inference_{stage}_summary_us")
        - count(before, f"nv_inference_{stage}_summary_us") == 20
        for stage in ("queue", "compute_input", "compute_infer", "compute_output")))
    for stage in ("request", "queue", "compute_input", "compute_infer", "compute_output"):
        name = f"nv_inference_{stage}_summary_us"
        assert families[name].type == "summary", name  # type: ignore[attr-defined]
        assert count(families, name) - count(before, name) == 20, name
        quantiles = {s.labels["quantile"]: s.value for s in families[name].samples  # type: ignore[attr-defined]
                     if s.labels.get("model") == "conv" and "quantile" in s.labels}
        assert set(quantiles) == {"0.5", "0.9", "0.95", "0.99"}, quantiles
        assert 0 <= quantiles["0.5"] <= quantiles["0.99"], quantiles
    durations = families["copyless_serve_request_duration_us"]
    assert durations.type == "histogram"  # type: ignore[attr-defined]
    sizes = [s for s in families["copyless_serve_request_bytes"].samples  # type: ignore[attr-defined]
             if s.name.endswith("_count") and s.labels["model"] == "conv"]
    assert sizes and sizes[0].value >= 20
    success = [s.value for s in families["nv_inference_request_success"].samples  # type: ignore[attr-defined]
               if s.labels.get("model") == "conv"]
    assert success == [count(families, "nv_inference_request_summary_us")]


def test_the_grafana_dashboard_queries_what_the_server_serves(server: InferenceServer) -> None:
    """docs/examples/grafana-copyless-serve.json: every metric its queries name is on the
    server's page (a renamed metric breaks the dashboard, and this test)."""
    import json
    import re
    from pathlib import Path

    dashboard = Path(__file__).resolve().parents[2] / "docs" / "examples" / \
        "grafana-copyless-serve.json"  # fmt: skip
    exprs = [t["expr"] for panel in json.loads(dashboard.read_text())["panels"]
             for t in panel["targets"]]  # fmt: skip
    named = {m for e in exprs for m in re.findall(r"\b((?:nv|copyless)_[a-z_]+)\b", e)}
    client = grpcclient.InferenceServerClient(server.url("grpc"))
    given = grpcclient.InferInput("input", [1, 3, 16, 16], "FP32")
    given.set_data_from_numpy(conv_rows(1))
    client.infer("conv", [given])  # a latency series shows once it has an observation

    def served(families: dict[str, object]) -> set[str]:
        return {*families, *(s.name for family in families.values()
                             for s in family.samples)}  # type: ignore[attr-defined]  # fmt: skip

    families = _settled(server, lambda page: named <= served(page))
    assert named and named <= served(families), sorted(named - served(families))
