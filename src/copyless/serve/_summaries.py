"""Latency distributions as Triton's summaries report them: per series, the quantiles 0.5,
0.9, 0.95 and 0.99 of the observations of the last minute (at most :data:`WINDOW` of them),
with the count and sum of all of them, rendered in Prometheus' text format
(``name{labels,quantile="0.99"}``, ``name_count``, ``name_sum``)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Mapping

__all__ = ["QUANTILES", "Summaries"]

QUANTILES = (0.5, 0.9, 0.95, 0.99)
#: Observations kept per series, at most; and for how long, seconds.
WINDOW, MAX_AGE_S = 4096, 60.0
_Key = tuple[str, tuple[tuple[str, str], ...]]


class Summaries:
    """Named summaries with labels (thread-safe)."""

    def __init__(self, docs: Mapping[str, str]) -> None:
        self._docs = dict(docs)
        self._recent: dict[_Key, collections.deque[tuple[float, float]]] = {}
        self._totals: dict[_Key, list[float]] = {}
        self._lock = threading.Lock()

    def observe(self, name: str, labels: Mapping[str, str], value: float) -> None:
        key = (name, tuple(labels.items()))
        now = time.monotonic()
        with self._lock:
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = collections.deque(maxlen=WINDOW)
                self._totals[key] = [0.0, 0.0]
            recent.append((now, value))
            totals = self._totals[key]
            totals[0] += 1
            totals[1] += value

    def render(self) -> list[str]:
        cutoff = time.monotonic() - MAX_AGE_S
        with self._lock:
            series = {k: ([v for t, v in r if t >= cutoff], list(self._totals[k]))
                      for k, r in self._recent.items()}  # fmt: skip
        lines: list[str] = []
        for name, doc in self._docs.items():
            rows = sorted((k, v) for k, v in series.items() if k[0] == name)
            if not rows:
                continue
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} summary"]
            for (_, labels), (values, (count, total)) in rows:
                text = ",".join(f'{k}="{v}"' for k, v in labels)
                values.sort()
                for q in QUANTILES:
                    value = values[min(len(values) - 1, int(q * len(values)))] if values \
                        else float("nan")  # fmt: skip
                    lines.append(f'{name}{{{text},quantile="{q}"}} {value!r}')
                lines.append(f"{name}_count{{{text}}} {count!r}")
                lines.append(f"{name}_sum{{{text}}} {total!r}")
        return lines
