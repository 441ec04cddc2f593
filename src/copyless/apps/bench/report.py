"""Results: one :class:`Row` per model/precision/batch/pipeline, as a table, JSON and PNG."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OK, WRONG, UNAVAILABLE, FAILED = "ok", "WRONG", "unavailable", "failed"
COLOURS = {"plain": "#444444", "peer": "#8fa8c8", "copyless": "#2e9e5b"}


@dataclass(frozen=True, slots=True)
class Row:
    """One pipeline in one configuration. Times are None unless ``status`` is ``ok``."""

    model: str
    precision: str
    batch: int
    pipeline: str
    family: str
    mode: str  # "sync" | "async"
    status: str
    ms_per_frame: float | None = None
    fps: float | None = None
    speedup: float | None = None  # plain ms / this ms; > 1 is faster than plain
    rounds_ms: tuple[float, ...] = ()
    note: str = ""

    @property
    def config(self) -> str:
        return f"{self.model} {self.precision} b{self.batch}"


def table(rows: Sequence[Row]) -> str:
    """A fixed-width text table, one block per configuration."""
    head = f"{'config':<28}{'pipeline':<22}{'ms/frame':>10}{'FPS':>9}{'vs plain':>10}  note"
    lines = [head, "-" * len(head)]
    last = None
    for row in rows:
        if last is not None and row.config != last:
            lines.append("")
        last = row.config
        if row.status == OK and row.ms_per_frame is not None:
            ms, fps = f"{row.ms_per_frame:10.3f}", f"{row.fps or 0.0:9.1f}"
            ratio = f"{row.speedup:9.2f}x" if row.speedup is not None else f"{'-':>10}"
        else:
            ms, fps, ratio = f"{row.status:>10}", f"{'-':>9}", f"{'-':>10}"
        lines.append(f"{row.config:<28}{row.pipeline:<22}{ms}{fps}{ratio}  {row.note}".rstrip())
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """Facts that make figures comparable: CPU, cores, library versions, date."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    facts: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    for package in ("copyless", "numpy", "onnxruntime", "openvino", "pillow"):
        try:
            facts[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            facts[package] = None
    return facts


def write_json(path: Path, rows: Sequence[Row], settings: dict[str, Any]) -> Path:
    data = {"machine": machine(), "settings": settings, "rows": [asdict(r) for r in rows]}
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def write_png(path: Path, rows: Sequence[Row]) -> Path:
    """Grouped horizontal bars of speed-up vs plain, one subplot per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.patches import Patch

    configs: dict[str, list[Row]] = {}
    for row in rows:
        configs.setdefault(row.config, []).append(row)
    heights = [0.6 + 0.32 * len(group) for group in configs.values()] or [1.0]
    fig, axes = plt.subplots(
        len(heights), 1, figsize=(9, sum(heights) + 0.8), squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )  # fmt: skip
    top = max([r.speedup for r in rows if r.speedup is not None] + [1.0])
    for ax, (config, group) in zip(axes[:, 0], configs.items(), strict=False):
        _subplot(ax, config, group, top)
    handles = [Patch(color=c) for c in COLOURS.values()]
    fig.legend(handles, list(COLOURS), loc="upper right", ncol=3, frameon=False, fontsize=9)
    fig.suptitle("speed-up vs plain (per frame; > 1 is faster)", x=0.02, ha="left", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _subplot(ax: Any, config: str, group: list[Row], top: float) -> None:
    names = [r.pipeline for r in group][::-1]
    values = [r.speedup or 0.0 for r in group][::-1]
    colours = [COLOURS.get(r.family, "#999999") for r in group][::-1]
    bars = ax.barh(names, values, color=colours)
    for bar, row in zip(bars, group[::-1], strict=True):
        text = row.status if row.speedup is None else f"{row.speedup:.2f}x"
        if row.ms_per_frame is not None:
            text += f"  ({row.ms_per_frame:.2f} ms)"
        ax.text(bar.get_width() + top * 0.01, bar.get_y() + bar.get_height() / 2, text,
                va="center", fontsize=8)  # fmt: skip
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_xlim(0, top * 1.3)
    ax.set_title(config, fontsize=10, loc="left")
    ax.tick_params(axis="y", labelsize=8)
