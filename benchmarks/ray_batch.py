"""copyless-batch against the plain Ray batch-inference pipeline, whole processes.

Both classify the same folder of JPEGs (real photos from scikit-image, cropped and scaled to
ImageNet-like sizes, 300-900 px) with EfficientNet-Lite0 on a fresh local Ray, with the same
number of actors and batch size:

* ``copyless-batch DIR -o OUT.parquet --actors N`` (no decode stage: each actor runs a
  copyless Pipeline whose prepare decodes a path with libjpeg-turbo (DCT downscaling) and
  the fused resize/crop straight into its row of the engine's RGBx batch tensor,
  normalisation folded into the graph, 2 jobs in flight, two Ray Data calls at once);
* ``benchmarks/ray_guide.py`` (the guide: PIL decode/resize/crop/normalise in
  ``map_batches``, an actor pool of onnxruntime sessions, ``write_parquet``).

Each run is a whole process, timed from start to exit (Ray's start-up included), the two
alternating round by round, 1 and 2 actors. Reported: median images/s over the rounds,
the ratio copyless / plain, the CPU time per image of each process tree (sampled every
0.2 s: on a shared machine the CPU a pipeline needs is steadier than its wall time), and
the in-pipeline rate each prints (time after Ray is up). Before timing, both outputs are
checked: every image present once, cat photos labelled as a cat class, espresso as 967.

Run: ``.venv/bin/python benchmarks/ray_batch.py [--images 1000] [--rounds 3]
[--actors 1,2] [--batch-size 32] [--quick]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from PIL import Image

from copyless.model import zoo

HERE = Path(__file__).resolve().parent
CLASSES = {"chelsea": {281, 282, 285}, "coffee": {967}}
RATE = re.compile(r"(\d+) images.* in (\d+\.\d+) s, (\d+\.\d+) images/s")


def make_photos(folder: Path, count: int) -> None:
    """``count`` JPEGs: random crops (60-100% of each side) of chelsea and coffee, scaled
    0.8-1.6x, quality 85-95."""
    from skimage import data

    rng = np.random.default_rng(0)
    sources = {name: Image.fromarray(getattr(data, name)()) for name in CLASSES}
    for i in range(count):
        name = list(CLASSES)[i % len(CLASSES)]
        image = sources[name]
        w, h = image.size
        cw, ch = int(w * rng.uniform(0.6, 1.0)), int(h * rng.uniform(0.6, 1.0))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        scale = rng.uniform(0.8, 1.6)
        crop = image.crop((x, y, x + cw, y + ch)).resize((int(cw * scale), int(ch * scale)))
        crop.save(folder / f"{name}_{i:05d}.jpg", quality=int(rng.integers(85, 96)))


def run(command: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds of the whole process tree (sampled: Ray's processes are
    not all reaped by their parents), in-pipeline images/s."""
    import psutil

    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    cpu: dict[int, float] = {}
    root = psutil.Process(process.pid)
    while process.poll() is None:
        for proc in [root, *_children(root)]:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                cpu[proc.pid] = times.user + times.system
        time.sleep(0.2)
    wall = time.perf_counter() - start
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{command[:3]} failed:\n{out}\n{err[-3000:]}")
    match = RATE.search(out)
    if match is None:
        raise RuntimeError(f"no rate in {out!r}")
    return wall, sum(cpu.values()), float(match.group(3))


def _children(root: Any) -> list[Any]:
    import psutil

    try:
        return list(root.children(recursive=True))
    except psutil.Error:
        return []


def check(table_path: Path, count: int) -> None:
    table = pq.read_table(table_path, columns=["path", "class_id"]).to_pylist()
    paths = [row["path"] for row in table]
    if len(paths) != count or len(set(paths)) != count:
        raise RuntimeError(f"{table_path}: {len(paths)} rows, {len(set(paths))} distinct")
    wrong = [r for r in table if r["class_id"] not in CLASSES[Path(r["path"]).name.split("_")[0]]]
    if len(wrong) > count // 50:  # crops may cut the cat's head off; no more than 2%
        raise RuntimeError(f"{table_path}: {len(wrong)} of {count} mislabelled: {wrong[:3]}")



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--actors", default="1,2")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="300 images, 1 round")
    args = parser.parse_args()
    from _bytecode import compile_trees

    compile_trees(str(Path(zoo.__file__).parents[2]))  # the copyless package
    if args.quick:
        args.images, args.rounds = 300, 1
    work = Path(tempfile.mkdtemp(prefix="cl-raybench-"))
    try:
        _bench(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _bench(args: argparse.Namespace, work: Path) -> None:
    photos = work / "photos"
    photos.mkdir()
    make_photos(photos, args.images)
    model = zoo.build("efficientnet-lite0", progress=False)
    bin_dir = Path(sys.executable).parent
    # The plain pipeline's Ray keeps its session files under RAY_TMPDIR (removed with the
    # work folder); copyless-batch removes its own.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env["RAY_TMPDIR"] = str(work / "ray")
    contenders = {
        "copyless-batch": lambda n, out: [
            str(bin_dir / "copyless-batch"), str(photos), "-o", str(out / "out.parquet"),
            "--actors", str(n), "--batch-size", str(args.batch_size),
        ],
        "plain Ray guide": lambda n, out: [
            sys.executable, str(HERE / "ray_guide.py"), str(photos), "-o", str(out),
            "--model", str(model), "--actors", str(n), "--batch-size", str(args.batch_size),
        ],
    }  # fmt: skip
    actor_counts = [int(a) for a in args.actors.split(",")]
    samples: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    print(f"load before: {os.getloadavg()[0]:.2f}; {args.images} images, {args.rounds} rounds")
    for round_ in range(args.rounds):
        for actors in actor_counts:
            for name, command in contenders.items():
                out = work / f"out-{round_}-{actors}-{name[0]}"
                out.mkdir()
                wall, cpu, rate = run(command(actors, out), env)
                check(out, args.images)
                samples.setdefault((name, actors), []).append((wall, cpu, rate))
                print(
                    f"  round {round_} {actors} actor(s) {name:16s} {args.images / wall:6.1f} "
                    f"images/s whole process ({wall:.1f} s), {rate:6.1f} in pipeline, "
                    f"{cpu / args.images * 1000:.1f} ms CPU/image",
                    flush=True,
                )
                shutil.rmtree(out)
    print(f"load after: {os.getloadavg()[0]:.2f}")
    for actors in actor_counts:
        rates = {}
        for name in contenders:
            walls, cpus, inner = zip(*samples[(name, actors)], strict=True)
            rates[name] = (
                args.images / statistics.median(walls),
                statistics.median(inner),
                statistics.median(cpus) / args.images * 1000,
            )
        (c_rate, c_inner, c_cpu), (p_rate, p_inner, p_cpu) = rates.values()
        print(
            f"ray batch, {actors} actor(s): copyless-batch {c_rate:.1f} images/s vs plain "
            f"{p_rate:.1f} -> {c_rate / p_rate:.2f}x whole process; in pipeline "
            f"{c_inner:.1f} vs {p_inner:.1f} -> {c_inner / p_inner:.2f}x; CPU/image "
            f"{c_cpu:.1f} vs {p_cpu:.1f} ms"
        )


if __name__ == "__main__":
    main()
