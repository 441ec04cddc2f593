"""Prometheus metrics of a server, with Triton's names where Triton has one.

Per model (labels ``model``, ``version``), as Triton reports them (cumulative counters,
durations in microseconds, no ``_total`` suffix):

* ``nv_inference_request_success`` / ``nv_inference_request_failure`` (label ``reason``:
  ``REJECTED`` for a full queue, ``BACKEND`` for a failed run, ``OTHER`` for a bad request,
  ``CANCELED`` for a client that left): requests;
* ``nv_inference_count`` (rows inferred) and ``nv_inference_exec_count`` (batches run);
* ``nv_inference_request_duration_us`` (arrival to answer), ``nv_inference_queue_duration_us``
  (queued, to the row's prepare), ``nv_inference_compute_input_duration_us`` (rows written
  into the batch), ``nv_inference_compute_infer_duration_us`` (the engine's run, per row),
  ``nv_inference_compute_output_duration_us`` (rows read out);
* ``nv_inference_pending_request_count`` (gauge: requests admitted and not yet answered).

Latency distributions, as Triton's summaries name them (``--metrics-config
summary_latencies=true`` there; always on here): ``nv_inference_request_summary_us``,
``nv_inference_queue_summary_us``, ``nv_inference_compute_input_summary_us``,
``nv_inference_compute_infer_summary_us``, ``nv_inference_compute_output_summary_us``:
quantiles 0.5 / 0.9 / 0.95 / 0.99 of the last minute, with ``_count`` and ``_sum``
(:mod:`._summaries`). The request duration is also a histogram,
``copyless_serve_request_duration_us`` (buckets from 100 us to 10 s: aggregate it across
servers with ``histogram_quantile``).

copyless's own: ``copyless_serve_batch_size`` (histogram of rows per batch run),
``copyless_serve_request_bytes`` (histogram of request sizes: body or message bytes) and
``copyless_serve_model_ready`` (gauge, 1 when the model takes requests).

A :class:`ServeMetrics` has a registry of its own (two servers in one process do not mix);
:meth:`ServeMetrics.render` gives the text format that ``--metrics`` serves.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from ._summaries import Summaries

__all__ = ["FAILURE_REASONS", "ServeMetrics"]

FAILURE_REASONS = ("REJECTED", "BACKEND", "OTHER", "CANCELED")
_COUNTERS = {
    "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
    "nv_inference_count": "Number of inferences performed (rows; a request of k rows is k)",
    "nv_inference_exec_count": "Number of model executions performed (batches)",
    "nv_inference_request_duration_us": "Cumulative inference request duration in us",
    "nv_inference_queue_duration_us": "Cumulative inference queuing duration in us",
    "nv_inference_compute_input_duration_us": "Cumulative compute input duration in us",
    "nv_inference_compute_infer_duration_us": "Cumulative compute inference duration in us",
    "nv_inference_compute_output_duration_us": "Cumulative inference compute output duration "
    "in us",
}
#: not exported: the request durations of successes and failures apart (statistics)
_SUCCESS_US, _FAIL_US = "success_us", "fail_us"
_SUMMARIES = {
    "nv_inference_request_summary_us": "Summary of inference request duration in usec",
    "nv_inference_queue_summary_us": "Summary of inference queuing duration in usec",
    "nv_inference_compute_input_summary_us": "Summary of compute input duration in usec",
    "nv_inference_compute_infer_summary_us": "Summary of compute inference duration in usec",
    "nv_inference_compute_output_summary_us": "Summary of inference compute output duration "
    "in usec",
}
_FAILURE = "nv_inference_request_failure"
_PENDING = "nv_inference_pending_request_count"
_READY = "copyless_serve_model_ready"
_Key = tuple[str, str]  # (model, version)


def _labels(labels: Mapping[str, str]) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return ",".join(f'{key}="{escape(value)}"' for key, value in labels.items())


def _family(name: str, doc: str, kind: str,
            samples: Iterator[tuple[Mapping[str, str], float]]) -> list[str]:  # fmt: skip
    """One metric in the text format, named exactly ``name`` (prometheus_client would add
    ``_total`` to a counter's name; Triton's have none)."""
    lines = [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{{{_labels(labels)}}} {value!r}" for labels, value in samples]
    return lines


class ServeMetrics:
    """The counters every model of a server adds to (thread-safe)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._counters: dict[_Key, dict[str, float]] = defaultdict(dict)
        self._failures: dict[tuple[str, str, str], float] = defaultdict(float)
        self._gauges: dict[_Key, dict[str, float]] = defaultdict(dict)
        self._last: dict[_Key, float] = {}
        self._batch = Histogram("copyless_serve_batch_size", "Rows per batch the model ran",
                                ["model", "version"], registry=self.registry,
                                buckets=(1, 2, 4, 8, 16, 32, 64, 128))  # fmt: skip
        self._summaries = Summaries(_SUMMARIES)
        self._durations = Histogram(
            "copyless_serve_request_duration_us", "Inference request duration in usec",
            ["model", "version"], registry=self.registry,
            buckets=(100, 250, 500, 1e3, 2.5e3, 5e3, 1e4, 2.5e4, 5e4, 1e5, 2.5e5, 5e5, 1e6,
                     2.5e6, 1e7))  # fmt: skip
        self._bytes = Histogram(
            "copyless_serve_request_bytes", "Inference request size in bytes (body or message)",
            ["model"], registry=self.registry,
            buckets=tuple(float(4**k) for k in range(5, 15)))  # 1 KiB .. 256 MiB

    def add_model(self, model: str, version: str) -> None:
        """Show the model's series (at zero) before its first request."""
        key = (model, version)
        with self._lock:
            self._counters[key].update({n: self._counters[key].get(n, 0.0) for n in _COUNTERS})
            self._gauges[key].setdefault(_PENDING, 0.0)
            self._gauges[key].setdefault(_READY, 0.0)
            for reason in FAILURE_REASONS:
                self._failures[(model, version, reason)] += 0.0

    def _add(self, key: _Key, values: Mapping[str, float]) -> None:
        with self._lock:
            counters = self._counters[key]
            for name, value in values.items():
                counters[name] = counters.get(name, 0.0) + value

    def request_done(self, model: str, version: str, seconds: float) -> None:
        self._add((model, version), {"nv_inference_request_success": 1.0,
                                     "nv_inference_request_duration_us": seconds * 1e6,
                                     _SUCCESS_US: seconds * 1e6})  # fmt: skip
        labels = {"model": model, "version": version}
        self._summaries.observe("nv_inference_request_summary_us", labels, seconds * 1e6)
        self._durations.labels(model, version).observe(seconds * 1e6)
        with self._lock:
            self._last[(model, version)] = time.time()

    def request_failed(self, model: str, version: str, reason: str, seconds: float) -> None:
        with self._lock:
            self._failures[(model, version, reason)] += 1.0
        self._add((model, version), {"nv_inference_request_duration_us": seconds * 1e6,
                                     _FAIL_US: seconds * 1e6})  # fmt: skip

    def answered(self, model: str, version: str, received: float, reason: str | None) -> None:
        """A request received at ``received`` (perf_counter) is answered: no longer pending,
        a success (``reason`` None) or a failure for ``reason``. Called before the caller
        is answered, so that a client reading the metrics then finds its request counted."""
        seconds = time.perf_counter() - received
        self.pending(model, version, -1)
        if reason is None:
            self.request_done(model, version, seconds)
        else:
            self.request_failed(model, version, reason, seconds)

    def row(self, model: str, version: str, queue: float, timings: Mapping[str, float]) -> None:
        """One row's stages, seconds (``timings``: a pipeline Result's)."""
        stages = {"queue": queue, "compute_input": timings.get("prepare", 0.0),
                  "compute_infer": timings.get("infer", 0.0),
                  "compute_output": timings.get("finish", 0.0)}  # fmt: skip
        values = {f"nv_inference_{stage}_duration_us": s * 1e6 for stage, s in stages.items()}
        self._add((model, version), {"nv_inference_count": 1.0, **values})
        labels = {"model": model, "version": version}
        for stage, seconds in stages.items():
            self._summaries.observe(f"nv_inference_{stage}_summary_us", labels, seconds * 1e6)

    def request_bytes(self, model: str, nbytes: int) -> None:
        self._bytes.labels(model).observe(nbytes)

    def batch(self, model: str, version: str, rows: int) -> None:
        self._add((model, version), {"nv_inference_exec_count": 1.0})
        self._batch.labels(model, version).observe(rows)

    def pending(self, model: str, version: str, delta: int) -> None:
        with self._lock:
            gauges = self._gauges[(model, version)]
            gauges[_PENDING] = gauges.get(_PENDING, 0.0) + delta

    def ready(self, model: str, version: str, ready: bool) -> None:
        with self._lock:
            self._gauges[(model, version)][_READY] = 1.0 if ready else 0.0

    def snapshot(self) -> tuple[dict[_Key, dict[str, float]], dict[tuple[str, str, str], float],
                                dict[_Key, dict[str, float]]]:  # fmt: skip
        with self._lock:
            return ({k: dict(v) for k, v in self._counters.items()}, dict(self._failures),
                    {k: dict(v) for k, v in self._gauges.items()})  # fmt: skip

    def value(self, name: str, model: str, version: str = "1") -> float:
        """A counter's or gauge's current value (for tests and the benchmark)."""
        counters, failures, gauges = self.snapshot()
        if name == _FAILURE:
            return sum(v for (m, ver, _), v in failures.items() if (m, ver) == (model, version))
        return {**counters.get((model, version), {}),
                **gauges.get((model, version), {})}.get(name, 0.0)  # fmt: skip

    def statistics(self, model: str, version: str) -> dict[str, Any]:
        """The model's entry of Triton's statistics extension (``model_stats``): requests
        (success, fail: count and ns), rows queued and computed (queue, compute input / infer /
        output: count is rows, ns their sum), inference (rows) and execution (batches)
        counts, the last inference (ms since the epoch)."""
        counters, failures, _ = self.snapshot()
        values = counters.get((model, version), {})
        with self._lock:
            last = self._last.get((model, version), 0.0)

        def stat(count: float, us: float) -> dict[str, int]:
            return {"count": int(count), "ns": int(us * 1000)}

        rows = values.get("nv_inference_count", 0.0)
        failed = sum(v for (m, ver, _), v in failures.items() if (m, ver) == (model, version))
        return {
            "name": model, "version": version, "last_inference": int(last * 1000),
            "inference_count": int(rows),
            "execution_count": int(values.get("nv_inference_exec_count", 0.0)),
            "inference_stats": {
                "success": stat(values.get("nv_inference_request_success", 0.0),
                                values.get(_SUCCESS_US, 0.0)),
                "fail": stat(failed, values.get(_FAIL_US, 0.0)),
                **{stage: stat(rows, values.get(f"nv_inference_{metric}_duration_us", 0.0))
                   for stage, metric in (("queue", "queue"), ("compute_input", "compute_input"),
                                         ("compute_infer", "compute_infer"),
                                         ("compute_output", "compute_output"))},
            },
        }  # fmt: skip

    def _triton_lines(self) -> list[str]:
        counters, failures, gauges = self.snapshot()
        lines: list[str] = []
        for name, doc in _COUNTERS.items():
            lines += _family(name, doc, "counter", (
                ({"model": m, "version": v}, values.get(name, 0.0))
                for (m, v), values in counters.items()))  # fmt: skip
        lines += _family(_FAILURE, "Number of failed inference requests, all batch sizes",
                         "counter", (({"model": m, "version": v, "reason": r}, value)
                                     for (m, v, r), value in failures.items()))  # fmt: skip
        for name, doc in ((_PENDING, "Instantaneous number of pending requests awaiting "
                           "execution per-model"),
                          (_READY, "1 when the model takes requests, 0 while it loads, "
                           "failed to load or drains")):  # fmt: skip
            lines += _family(name, doc, "gauge", (
                ({"model": m, "version": v}, values.get(name, 0.0))
                for (m, v), values in gauges.items()))  # fmt: skip
        return lines

    def render(self) -> bytes:
        """The Prometheus text format of every metric."""
        text = "\n".join(self._triton_lines() + self._summaries.render()) + "\n"
        return text.encode() + generate_latest(self.registry)
