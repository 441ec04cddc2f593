"""Where a Ray batch job's fixed cost goes: CPU seconds per kind of process, whole processes.

Runs ``copyless-batch`` and the plain guide pipeline (``benchmarks/ray_guide.py``) on the
same folder of photos, alternating, and samples each process tree every 0.1 s. A process's
CPU is charged to its kind, read from its command line: the driver (the command itself),
``gcs_server``, ``raylet``, Ray's Python services (dashboard agent, runtime-env agent, log
monitor), idle workers that ran nothing, and the workers that ran tasks or actors (named by
Ray as ``ray::NAME``). Reported per pipeline: median wall seconds, CPU seconds per kind,
and the images; the fixed cost is what a job spends that does not scale with its images.

Run: ``.venv/bin/python benchmarks/ray_startup.py [--images 300] [--rounds 3]
[--actors 1]``
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ray_batch import make_photos  # noqa: E402

KINDS = (
    ("gcs_server", "gcs_server"),
    ("raylet", "raylet"),
    ("dashboard", "dashboard"),
    ("runtime_env", "runtime_env"),
    ("log_monitor", "log_monitor"),
    ("default_worker", "worker (idle)"),
)


def kind(cmdline: list[str], root: int, pid: int) -> str:
    if pid == root:
        return "driver"
    text = " ".join(cmdline)
    if text.startswith("ray::"):
        return "ray::" + cmdline[0][5:].split("(")[0].split(".")[0][:24]
    for needle, name in KINDS:
        if needle in text:
            return name
    return "other"


def trace(command: list[str], env: dict[str, str]) -> tuple[float, dict[str, float]]:
    """Wall seconds and CPU seconds per kind of process of one run."""
    import psutil

    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    root = psutil.Process(process.pid)
    cpu: dict[int, float] = {}
    kinds: dict[int, str] = {}
    while process.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            tree = [root]
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                cpu[proc.pid] = times.user + times.system
                # A worker's title changes to ray::NAME once it runs something.
                name = kind(proc.cmdline(), root.pid, proc.pid)
                seen = kinds.get(proc.pid, "")
                if not seen.startswith("ray::") or seen == "ray::IDLE":
                    kinds[proc.pid] = name
        time.sleep(0.1)
    wall = time.perf_counter() - start
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{command[:3]} failed:\n{out}\n{err[-3000:]}")
    per_kind: dict[str, float] = collections.defaultdict(float)
    for pid, seconds in cpu.items():
        per_kind[kinds[pid]] += seconds
        per_kind["processes: " + kinds[pid]] += 1
    return wall, dict(per_kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--actors", type=int, default=1)
    parser.add_argument("--only", choices=("copyless", "guide"), help="one pipeline only")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cl-raytrace-"))
    try:
        _trace(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _trace(args: argparse.Namespace, work: Path) -> None:
    from copyless.model import zoo

    photos = work / "photos"
    photos.mkdir()
    make_photos(photos, args.images)
    model = zoo.build("efficientnet-lite0", progress=False)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env["RAY_TMPDIR"] = str(work / "ray")
    n = str(args.actors)
    contenders = {
        "copyless": lambda out: [
            str(bin_dir / "copyless-batch"), str(photos), "-o", str(out / "out.parquet"),
            "--actors", n,
        ],
        "guide": lambda out: [
            sys.executable, str(HERE / "ray_guide.py"), str(photos), "-o", str(out),
            "--model", str(model), "--actors", n,
        ],
    }  # fmt: skip
    if args.only:
        contenders = {args.only: contenders[args.only]}
    samples: dict[str, list[tuple[float, dict[str, float]]]] = collections.defaultdict(list)
    print(f"load before: {os.getloadavg()[0]:.2f}; {args.images} images, {n} actor(s)")
    for round_ in range(args.rounds):
        for name, command in contenders.items():
            out = work / f"out-{round_}-{name}"
            out.mkdir()
            samples[name].append(trace(command(out), env))
            shutil.rmtree(out)
    print(f"load after: {os.getloadavg()[0]:.2f}")
    for name, runs in samples.items():
        _report(name, runs)


def _report(name: str, runs: list[tuple[float, dict[str, Any]]]) -> None:
    kinds = sorted({k for _, per_kind in runs for k in per_kind if not k.startswith("proc")})
    wall = statistics.median(w for w, _ in runs)
    total = statistics.median(
        sum(v for k, v in per_kind.items() if not k.startswith("proc")) for _, per_kind in runs
    )
    print(f"{name}: wall {wall:.1f} s, CPU {total:.1f} s (medians over {len(runs)} runs)")
    for k in kinds:
        seconds = statistics.median(per_kind.get(k, 0.0) for _, per_kind in runs)
        count = statistics.median(per_kind.get("processes: " + k, 0) for _, per_kind in runs)
        print(f"  {k:30s} {seconds:6.1f} s CPU in {count:g} process(es)")


if __name__ == "__main__":
    main()
