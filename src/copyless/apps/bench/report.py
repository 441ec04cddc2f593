"""Results: one :class:`Row` per model/precision/batch/pipeline, as tables, JSON and PNG.

:func:`table` gives ms/frame, FPS, the speed-up vs plain and the ratio to the row's engine
alone (the limit); :func:`breakdown` the per-stage ms/frame of the pipelines that time their
stages; :func:`verdicts` says per configuration which copyless pipeline is fastest and, when
it is not a zero-copy one, why (within the rounds' noise, or by how much).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .stages import STAGES

OK, WRONG, UNAVAILABLE, FAILED = "ok", "WRONG", "unavailable", "failed"
COLOURS = {"plain": "#444444", "peer": "#8fa8c8", "copyless": "#2e9e5b", "limit": "#d9a441"}
STAGE_COLOURS = {"decode": "#b3b3b3", "preprocess": "#e08a4f", "infer": "#4f7fbf",
                 "postprocess": "#7fbf7f"}  # fmt: skip


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
    engine: str = ""  # "ort" | "ov": the engine whose engine-alone row is this row's limit
    vs_limit: float | None = None  # this ms / engine-alone ms; 1.0 is the limit
    stages_ms: dict[str, float] = field(default_factory=dict)  # median ms/frame per stage

    @property
    def config(self) -> str:
        return f"{self.model} {self.precision} b{self.batch}"


def table(rows: Sequence[Row]) -> str:
    """A fixed-width text table, one block per configuration."""
    head = (f"{'config':<28}{'pipeline':<22}{'ms/frame':>10}{'FPS':>9}{'vs plain':>10}"
            f"{'x limit':>9}  note")  # fmt: skip
    lines = [head, "-" * len(head)]
    last = None
    for row in rows:
        if last is not None and row.config != last:
            lines.append("")
        last = row.config
        if row.status == OK and row.ms_per_frame is not None:
            ms, fps = f"{row.ms_per_frame:10.3f}", f"{row.fps or 0.0:9.1f}"
            ratio = f"{row.speedup:9.2f}x" if row.speedup is not None else f"{'-':>10}"
            limit = f"{row.vs_limit:8.2f}x" if row.vs_limit is not None else f"{'-':>9}"
        else:
            ms, fps, ratio, limit = f"{row.status:>10}", f"{'-':>9}", f"{'-':>10}", f"{'-':>9}"
        line = f"{row.config:<28}{row.pipeline:<22}{ms}{fps}{ratio}{limit}  {row.note}"
        lines.append(line.rstrip())
    return "\n".join(lines)


def breakdown(rows: Sequence[Row]) -> str:
    """Per-stage median ms/frame of every row that timed its stages (sync pipelines)."""
    head = f"{'config':<28}{'pipeline':<22}" + "".join(f"{s:>12}" for s in STAGES) + "  (ms/frame)"
    lines = [head, "-" * len(head)]
    for row in rows:
        if row.status != OK or not row.stages_ms:
            continue
        cells = "".join(
            f"{row.stages_ms[s]:12.3f}" if s in row.stages_ms else f"{'-':>12}" for s in STAGES
        )
        lines.append(f"{row.config:<28}{row.pipeline:<22}{cells}")
    return "\n".join(lines)


def _zero_copy(row: Row) -> bool:
    """copyless's zero-copy pipelines: HW-view tensors (sync ``-zc`` and the async ones)."""
    return row.family == "copyless" and not row.pipeline.endswith("-cpu")


def verdicts(rows: Sequence[Row]) -> list[str]:
    """Per configuration: copyless's fastest pipeline and whether it is a zero-copy one;
    when it is not, whether the zero-copy one's rounds overlap it (noise) or by how much
    it loses."""
    configs: dict[str, list[Row]] = {}
    for row in rows:
        if row.status == OK and row.family == "copyless" and row.ms_per_frame is not None:
            configs.setdefault(row.config, []).append(row)
    lines = []
    for config, group in configs.items():
        best = min(group, key=lambda r: r.ms_per_frame or 0.0)
        zc = [r for r in group if _zero_copy(r)]
        head = f"{config}: fastest copyless pipeline {best.pipeline}"
        if _zero_copy(best):
            lines.append(f"{head} ({best.ms_per_frame:.3f} ms/frame), zero-copy")
        elif not zc:
            lines.append(f"{head} is NOT zero-copy: no zero-copy pipeline ran")
        else:  # compare with the same engine's zero-copy sync row when it ran
            twin = [r for r in zc if r.engine == best.engine and r.mode == best.mode]
            other = min(twin or zc, key=lambda r: r.ms_per_frame or 0.0)
            lines.append(f"{head} is NOT zero-copy: {_why(best, other)}")
    return lines


def _why(best: Row, zc: Row) -> str:
    gap = (zc.ms_per_frame or 0.0) / (best.ms_per_frame or 1.0) - 1.0
    text = f"{zc.pipeline} is {gap * 100:.1f}% slower"
    if min(len(best.rounds_ms), len(zc.rounds_ms)) < 3:
        return f"{text}; too few rounds to tell from noise (use --rounds 3 or more)"
    if min(zc.rounds_ms) <= max(best.rounds_ms):
        return (f"{text}, within noise (rounds {min(best.rounds_ms):.2f}-"
                f"{max(best.rounds_ms):.2f} vs {min(zc.rounds_ms):.2f}-"
                f"{max(zc.rounds_ms):.2f} ms overlap)")  # fmt: skip
    stages = [
        f"{s} {zc.stages_ms[s] - best.stages_ms[s]:+.3f} ms"
        for s in STAGES
        if s in best.stages_ms and s in zc.stages_ms
    ]
    return f"{text} beyond the rounds' spread" + (f" ({', '.join(stages)})" if stages else "")


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
    """One line of two panels per configuration: speed-up vs plain (the engine-alone rows,
    the limits, in their own colour) and, per sync pipeline, its ms/frame stacked by stage
    with each engine's limit as a dotted line."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.patches import Patch

    configs: dict[str, list[Row]] = {}
    for row in rows:
        configs.setdefault(row.config, []).append(row)
    heights = [0.6 + 0.32 * len(group) for group in configs.values()] or [1.0]
    fig, axes = plt.subplots(
        len(heights), 2, figsize=(15, sum(heights) + 1.0), squeeze=False,
        gridspec_kw={"height_ratios": heights, "width_ratios": [1.0, 1.1]},
    )  # fmt: skip
    top = max([r.speedup for r in rows if r.speedup is not None] + [1.0])
    for (left, right), (config, group) in zip(axes, configs.items(), strict=False):
        _speedups(left, config, group, top)
        _stages(right, config, group)
    handles = [Patch(color=c) for c in (*COLOURS.values(), *STAGE_COLOURS.values())]
    fig.legend(handles, [*COLOURS, *STAGE_COLOURS], loc="upper right", ncol=8, frameon=False,
               fontsize=8)  # fmt: skip
    fig.suptitle("speed-up vs plain (> 1 is faster) | ms/frame by stage, dotted: engine alone",
                 x=0.01, ha="left", fontsize=11)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _speedups(ax: Any, config: str, group: list[Row], top: float) -> None:
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


def _stages(ax: Any, config: str, group: list[Row]) -> None:
    staged = [r for r in group if r.stages_ms][::-1]
    names = [r.pipeline for r in staged]
    left = [0.0] * len(staged)
    for stage in STAGES:
        widths = [r.stages_ms.get(stage, 0.0) for r in staged]
        ax.barh(names, widths, left=left, color=STAGE_COLOURS[stage])
        left = [a + b for a, b in zip(left, widths, strict=True)]
    limits = [r for r in group if r.family == "limit" and r.ms_per_frame is not None]
    for index, row in enumerate(limits):
        ms = row.ms_per_frame or 0.0
        ax.axvline(ms, color=COLOURS["limit"], linestyle=":", linewidth=1.5)
        ax.text(ms, len(staged) - 0.5 - 0.45 * index, f" {row.pipeline} {ms:.2f} ms",
                fontsize=7, color="#8a6414", va="bottom")  # fmt: skip
    ax.set_title(f"{config}: where the time goes (ms/frame)", fontsize=10, loc="left")
    ax.tick_params(axis="y", labelsize=8)
