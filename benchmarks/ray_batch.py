"""copyless-batch against the plain Ray batch-inference pipeline, whole processes.

Both classify the same folder of JPEGs (real photos from scikit-image, cropped and scaled to
ImageNet-like sizes, 300-900 px; ``--size phone``: each crop scaled to a phone camera's
3000-4032 px long side, quality 85-95) with EfficientNet-Lite0 on a fresh local Ray, with the same
number of actors and batch size:

* ``copyless-batch DIR -o OUT.parquet --actors N`` (no decode stage: each actor runs a
  copyless Pipeline whose prepare decodes a path with libjpeg-turbo (DCT downscaling) and
  the fused resize/crop straight into its row of the engine's RGBx batch tensor,
  normalisation folded into the graph, 2 jobs in flight, two Ray Data calls at once);
* ``benchmarks/ray_guide.py`` (the guide: PIL decode/resize/crop/normalise in
  ``map_batches``, an actor pool of onnxruntime sessions, ``write_parquet``).

``--tuned`` adds the guide as a careful user tunes it (``ray_guide.py --tuned``: each
actor's onnxruntime session on its share of the cores without spinning, PIL's JPEG draft
mode); the ratio is then against the faster of the two plain pipelines.

``--precision int8|fastest``: copyless-batch runs the zoo's EfficientNet-Lite0 compiled at
that precision for its batch (``-m``; calibrated on real photos, cached: see
``_app_precision``); the plain pipelines stay fp32. In every mode each copyless (and tuned)
run's top-1 is compared with the plain guide's fp32 top-1 of the same round, photo by
photo: the agreement (all photos, and those fp32 is sure of) is printed beside the speed.

Each run is a whole process, timed from start to exit (Ray's start-up included), the
contenders alternating round by round, 1 and 2 actors. Reported: median images/s over the
rounds, the ratio copyless / plain, the CPU time per image of each process tree (sampled every
0.2 s: on a shared machine the CPU a pipeline needs is steadier than its wall time), and
the in-pipeline rate each prints (time after Ray is up). Every output is checked: every
image present once, cat photos labelled as a cat class, espresso as 967 (at a reduced
precision copyless's mislabelled photos are counted, and it must agree with the plain fp32
on at least 80% of them: less is a broken pipeline, not a precision).

Run: ``python benchmarks/ray_batch.py [--images 1000] [--rounds 3] [--actors 1,2]
[--batch-size 32] [--size small|phone] [--tuned] [--precision fp32|int8|fastest
[--max-drop PCT]] [--quick]``; the last lines, per actor count: one per side and the ratio.
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


def make_photos(folder: Path, count: int, size: str = "small") -> None:
    """``count`` JPEGs: random crops (60-100% of each side) of chelsea and coffee, scaled
    0.8-1.6x (``size`` "phone": to a 3000-4032 px long side), quality 85-95."""
    from skimage import data

    rng = np.random.default_rng(0)
    sources = {name: Image.fromarray(getattr(data, name)()) for name in CLASSES}
    for i in range(count):
        name = list(CLASSES)[i % len(CLASSES)]
        image = sources[name]
        w, h = image.size
        cw, ch = int(w * rng.uniform(0.6, 1.0)), int(h * rng.uniform(0.6, 1.0))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        scale, resample = rng.uniform(0.8, 1.6), Image.Resampling.BICUBIC
        if size == "phone":  # bilinear: a 12 MP bicubic upscale took a second a photo
            scale, resample = rng.uniform(3000, 4032) / max(cw, ch), Image.Resampling.BILINEAR
        crop = image.crop((x, y, x + cw, y + ch))
        crop = crop.resize((int(cw * scale), int(ch * scale)), resample)
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


def check(table_path: Path, count: int, strict: bool = True) -> dict[str, tuple[int, float]]:
    """Every image once; no more than 2% mislabelled (``strict``; else counted). Returns
    (top-1, its score) per photo's file name."""
    table = pq.read_table(table_path, columns=["path", "class_id", "score"]).to_pylist()
    paths = [row["path"] for row in table]
    if len(paths) != count or len(set(paths)) != count:
        raise RuntimeError(f"{table_path}: {len(paths)} rows, {len(set(paths))} distinct")
    wrong = [r for r in table if r["class_id"] not in CLASSES[Path(r["path"]).name.split("_")[0]]]
    if strict and len(wrong) > count // 50:  # crops may cut the cat's head off
        raise RuntimeError(f"{table_path}: {len(wrong)} of {count} mislabelled: {wrong[:3]}")
    return {Path(r["path"]).name: (int(r["class_id"]), float(r["score"])) for r in table}



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--actors", default="1,2")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--size", choices=("small", "phone"), default="small",
                        help="photos of 300-900 px (small) or 3000-4032 px (phone)")
    parser.add_argument("--tuned", action="store_true", help="also the plain pipeline tuned "
                        "by hand (ray_guide.py --tuned); the ratio takes the faster plain")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "int8", "fastest"],
                        help="copyless-batch's classifier: the built-in fp32 one, or the zoo's "
                        "compiled at this precision (calibrated on real photos, cached); "
                        "the plain pipelines stay fp32")
    parser.add_argument("--max-drop", type=float, metavar="PCT", help="with --precision int8: "
                        "accuracy control (points of top-1 agreement with fp32)")
    parser.add_argument("--calibration", type=int, default=128, metavar="N", help="with "
                        "--precision int8|fastest: calibration photos (seeded variants of "
                        "real photos)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="300 images, 1 round")
    args = parser.parse_args()  # fmt: skip
    if args.max_drop is not None and args.precision == "fp32":
        parser.error("--max-drop needs --precision int8 or fastest")
    from _bytecode import compile_trees

    compile_trees(str(Path(zoo.__file__).parents[2]))  # the copyless package
    if args.quick:
        args.images, args.rounds = 300, 1
    work = Path(tempfile.mkdtemp(prefix="cl-raybench-"))
    try:
        _bench(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


COPYLESS, GUIDE, TUNED = "copyless-batch", "plain Ray guide", "plain Ray tuned"


def _contenders(args: argparse.Namespace, photos: Path) -> dict[str, Any]:
    """Each contender's command for (actors, output folder)."""
    from _app_precision import classifier, record_line
    from copyless.apps.batch import BUILTIN_BATCH

    model = zoo.build("efficientnet-lite0", progress=False)
    # the reduced model at the built-in one's batch (a compiled model runs at its own)
    reduced = classifier(args.precision, batch_size=BUILTIN_BATCH, max_drop=args.max_drop,
                         calibration=args.calibration)  # fmt: skip
    print(record_line(reduced))
    ours = ["-m", str(reduced)] if reduced is not None else []
    bin_dir = Path(sys.executable).parent
    contenders = {
        COPYLESS: lambda n, out: [
            str(bin_dir / "copyless-batch"), str(photos), "-o", str(out / "out.parquet"),
            "--actors", str(n), "--batch-size", str(args.batch_size), *ours,
        ],
        GUIDE: lambda n, out: [
            sys.executable, str(HERE / "ray_guide.py"), str(photos), "-o", str(out),
            "--model", str(model), "--actors", str(n), "--batch-size", str(args.batch_size),
        ],
    }  # fmt: skip
    if args.tuned:
        contenders[TUNED] = lambda n, out: [*contenders[GUIDE](n, out), "--tuned"]
    return contenders


def _bench(args: argparse.Namespace, work: Path) -> None:
    from _app_precision import Agreement

    photos = work / "photos"
    photos.mkdir()
    make_photos(photos, args.images, args.size)
    contenders = _contenders(args, photos)
    # The plain pipeline's Ray keeps its session files under RAY_TMPDIR (removed with the
    # work folder); copyless-batch removes its own.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env["RAY_TMPDIR"] = str(work / "ray")
    actor_counts = [int(a) for a in args.actors.split(",")]
    samples: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    agreements: dict[tuple[str, int], list[Agreement]] = {}
    print(f"load before: {os.getloadavg()[0]:.2f}; {args.images} {args.size} images, "
          f"{args.rounds} rounds; copyless-batch at {args.precision}")  # fmt: skip
    for round_ in range(args.rounds):
        for actors in actor_counts:
            top1 = {}
            for name, command in contenders.items():
                out = work / f"out-{round_}-{actors}-{name.split()[-1]}"
                out.mkdir()
                wall, cpu, rate = run(command(actors, out), env)
                top1[name] = check(out, args.images, args.precision == "fp32" or name != COPYLESS)
                samples.setdefault((name, actors), []).append((wall, cpu, rate))
                print(
                    f"  round {round_} {actors} actor(s) {name:16s} {args.images / wall:6.1f} "
                    f"images/s whole process ({wall:.1f} s), {rate:6.1f} in pipeline, "
                    f"{cpu / args.images * 1000:.1f} ms CPU/image",
                    flush=True,
                )
                shutil.rmtree(out)
            for name in contenders:  # against the guide's fp32 top-1, photo by photo
                if name != GUIDE:
                    agree = Agreement.of({k: c for k, (c, _) in top1[name].items()}, top1[GUIDE])
                    agreements.setdefault((name, actors), []).append(agree)
            if agreements[COPYLESS, actors][-1].share < 0.8:
                raise RuntimeError(f"copyless-batch agrees with the plain guide on only "
                                   f"{agreements[COPYLESS, actors][-1].share:.0%} of photos")
    print(f"load after: {os.getloadavg()[0]:.2f}")
    for actors in actor_counts:
        _summary(args, actors, samples, agreements)


def _summary(args: argparse.Namespace, actors: int,
             samples: dict[tuple[str, int], list[tuple[float, float, float]]],
             agreements: dict[tuple[str, int], list[Any]]) -> None:  # fmt: skip
    """One line per side (copyless; the faster plain pipeline) and the ratio."""
    from _app_precision import worst

    rates = {}
    for name in (COPYLESS, GUIDE, TUNED):
        if (name, actors) not in samples:
            continue
        walls, cpus, inner = zip(*samples[(name, actors)], strict=True)
        rates[name] = (
            args.images / statistics.median(walls),
            statistics.median(inner),
            statistics.median(cpus) / args.images * 1000,
        )
    best = max((name for name in rates if name != COPYLESS), key=lambda k: rates[k][0])
    (c_rate, c_inner, c_cpu), (p_rate, p_inner, p_cpu) = rates[COPYLESS], rates[best]
    agree = worst(agreements[COPYLESS, actors])
    print(f"ray batch, {actors} actor(s), copyless-batch ({args.precision}): {c_rate:.1f} "
          f"images/s whole process, {c_inner:.1f} in pipeline, {c_cpu:.1f} ms CPU/image; "
          f"{agree.line(f'{args.size} photos')}")  # fmt: skip
    for name in rates:
        if name != COPYLESS:
            also = ""
            if name == TUNED:
                also = f"; {worst(agreements[name, actors]).line('photos')}"
            print(f"ray batch, {actors} actor(s), {name} (fp32): {rates[name][0]:.1f} images/s "
                  f"whole process, {rates[name][1]:.1f} in pipeline, {rates[name][2]:.1f} ms "
                  f"CPU/image{also}")  # fmt: skip
    print(
        f"ray batch, {actors} actor(s): copyless-batch {args.precision} {c_rate:.1f} images/s "
        f"vs {best} fp32 {p_rate:.1f} -> {c_rate / p_rate:.2f}x whole process; in pipeline "
        f"{c_inner:.1f} vs {p_inner:.1f} -> {c_inner / p_inner:.2f}x; CPU/image "
        f"{c_cpu:.1f} vs {p_cpu:.1f} ms; at {100 * agree.share:.1f}% top-1 agreement"
    )


if __name__ == "__main__":
    main()
