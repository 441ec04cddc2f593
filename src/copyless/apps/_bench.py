"""The benchmark block of the VART-ML samples, and a tiny per-stage timer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class StageTimes:
    """Accumulated seconds per stage over ``frames`` timed frames."""

    preprocess: list[float] = field(default_factory=list)
    infer: list[float] = field(default_factory=list)
    postprocess: list[float] = field(default_factory=list)

    def block(self) -> list[str]:
        """The seed's lines: per-stage ms / frame (means), total, and the two FPS figures."""
        n = max(1, len(self.infer))
        pre = sum(self.preprocess) / n * 1000.0
        inf = sum(self.infer) / n * 1000.0
        post = sum(self.postprocess) / n * 1000.0
        total = pre + inf + post
        return [
            f"{'preprocess':<24}{pre:.3f} ms / frame",
            f"{'infer':<24}{inf:.3f} ms / frame",
            f"{'postprocess':<24}{post:.3f} ms / frame",
            f"{'total':<24}{total:.3f} ms / frame",
            f"{'throughput (infer)':<24}{1000.0 / inf if inf else 0.0:.3f} FPS",
            f"{'throughput (pipeline)':<24}{1000.0 / total if total else 0.0:.3f} FPS",
        ]


def now() -> float:
    return time.perf_counter()
