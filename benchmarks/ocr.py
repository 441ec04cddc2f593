"""OCR end to end: copyless-ocr against RapidOCR on the same PP-OCR models, whole processes
over the same folders, stage by stage, upright and turned pages apart.

    python benchmarks/ocr.py [--pages N] [--turned N] [--rounds N] [--models v6|v4]
                       [--runner onnxruntime|openvino|vaiml] [--precision fp32|bf16]
                       [--no-angle] [--keep DIR]

Pages: ``--pages`` large drawn pages (sizes from 900 x 1600 to 1754 x 1240, portrait and
landscape, 6 to 14 lines of several type sizes and colours on tinted paper, drawn with PIL)
in one folder, and ``--turned`` more turned 90, 180 and 270 degrees in another, as PNG files.
Each side runs as its users call it, one whole process per folder: ``copyless-ocr -i DIR
--json-file OUT`` (its defaults: onnxruntime, angle classifier on; ``--runner`` chooses
another engine, ``--precision bf16`` OpenVINO's BF16 arithmetic) against a ``python -c``
running ``RapidOCR()(path)`` over the folder (the peer's defaults: RapidOCR 3.x for v6,
``rapidocr_onnxruntime`` for v4; angle classifier on).
Compiled models are cached before the first timed run (a warm-up process each side), as
after a user's first run. ``--rounds`` rounds, the side that goes first alternating; the
figures are medians over the rounds.

Rows, per folder and side: ``process`` the wall seconds of the whole process (start-up,
model loading and every page), ``cpu`` its user + system CPU seconds (less sensitive to
other processes' load than the wall time; RapidOCR's onnxruntime threads spin while they
wait, so its CPU includes spinning), then the stage seconds summed over the pages, as each
side reports them (copyless: decode, detect, crops (line geometry, crop sampling and the
angle classifier), recognise, from ``--json-file``; RapidOCR: det, cls, rec from its
``elapse_list``; copyless detects the next page while it recognises this one, so its stages
overlap and can add up to more than the process), the character error rate against the
drawn text and the lines read. The ratio rows are RapidOCR / copyless (> 1: copyless
faster). Last, the first answer: one whole process reading one page, each side.

The load average is printed before and after: these machines are shared, compare ratios,
and prefer the CPU ratio when the load is high.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from copyless.ocr import draw_page, installed_generations

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from ocr_helpers import cer

#: page sizes (width, height), cycled: the issue's documents, portrait and landscape
SIZES = ((1240, 1754), (900, 1600), (1754, 1240), (1100, 1500), (1600, 900), (1024, 1448),
         (1300, 1700), (1500, 1100))  # fmt: skip
TURNS = (90, 180, 270)
_OURS = ("decode", "detect", "crops", "recognise")
_PEERS = ("det", "cls", "rec")

_PEER_SCRIPT = """
import sys, json, contextlib, io, logging
from pathlib import Path
generation, folder, angle, out = sys.argv[1:5]
use_cls = angle == "yes"
with contextlib.redirect_stdout(io.StringIO()):
    if generation == "v6":
        from rapidocr import RapidOCR
        ocr = RapidOCR(params={"Global.log_level": "error", "Global.use_cls": use_cls})
    else:
        from rapidocr_onnxruntime import RapidOCR
        ocr = RapidOCR(use_cls=use_cls)
pages = {}
for path in sorted(Path(folder).glob("*.png")):
    result = ocr(str(path))
    if generation == "v6":
        texts, elapse = list(result.txts or ()), list(result.elapse_list or (0, 0, 0))
    else:
        texts = [t for _, t, _ in (result[0] or [])]
        elapse = list(result[1] or (0, 0, 0))
    pages[path.name] = {"texts": texts, "elapse": [float(e or 0) for e in elapse]}
Path(out).write_text(json.dumps(pages))
"""


@dataclass(frozen=True)
class Run:
    """One whole process over a folder: wall and CPU seconds, stage sums, CER, lines."""

    wall: float
    cpu: float
    stages: dict[str, float]
    cer: float
    lines: int


def _write_pages(folder: Path, count: int, turned: bool, seed: int) -> dict[str, list[str]]:
    folder.mkdir(parents=True, exist_ok=True)
    truth = {}
    for k in range(count):
        page = draw_page(seed + k, size=SIZES[k % len(SIZES)], lines=6 + (k * 5) % 9)
        image = Image.fromarray(page.image)
        if turned:
            image = image.rotate(TURNS[k % len(TURNS)], expand=True)
        name = f"page{k:02d}.png"
        image.save(folder / name)
        truth[name] = list(page.lines)
    return truth


def _timed(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _ours(folder: Path, out: Path, args: argparse.Namespace) -> tuple[float, float, dict]:
    cmd = [sys.executable, "-m", "copyless.apps.ocr", "-i", str(folder), "--json-file",
           str(out), "--models", args.models, "--precision", args.precision,
           "--angle" if args.angle else "--no-angle"]  # fmt: skip
    if args.precision == "fp32" or args.runner != "onnxruntime":
        cmd += ["--runner", args.runner]
    wall, cpu = _timed(cmd)
    doc = json.loads(out.read_text(encoding="utf-8"))
    pages = {Path(p["image"]).name: p for p in doc["images"]}
    return wall, cpu, pages


def _peer(folder: Path, out: Path, args: argparse.Namespace) -> tuple[float, float, dict]:
    cls = "yes" if args.angle else "no"
    wall, cpu = _timed([sys.executable, "-c", _PEER_SCRIPT, args.models, str(folder), cls,
                        str(out)])  # fmt: skip
    return wall, cpu, json.loads(out.read_text(encoding="utf-8"))


def _run(side: str, folder: Path, truth: dict[str, list[str]], args: argparse.Namespace,
         scratch: Path) -> Run:  # fmt: skip
    out = scratch / f"{side}-{folder.name}.json"
    if side == "copyless":
        wall, cpu, pages = _ours(folder, out, args)
        texts = {n: [ln["text"] for ln in p.get("lines", [])] for n, p in pages.items()}
        stages = {s: sum(p["ms_per_image"][s] for p in pages.values() if "ms_per_image" in p)
                  / 1e3 for s in _OURS}  # fmt: skip
    else:
        wall, cpu, pages = _peer(folder, out, args)
        texts = {n: p["texts"] for n, p in pages.items()}
        stages = {s: sum(p["elapse"][k] for p in pages.values()) for k, s in enumerate(_PEERS)}
    error = statistics.mean(cer(truth[n], texts.get(n, [])) for n in truth)
    return Run(wall, cpu, stages, error, sum(len(t) for t in texts.values()))


def _median(runs: list[Run]) -> Run:
    stages = {s: statistics.median(r.stages[s] for r in runs) for s in runs[0].stages}
    return Run(statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs),
               stages, runs[-1].cer, runs[-1].lines)  # fmt: skip


def _print_set(name: str, pages: int, ours: Run, peer: Run) -> None:
    for side, run in (("copyless", ours), ("rapidocr", peer)):
        stages = "  ".join(f"{s} {v:6.2f}" for s, v in run.stages.items())
        print(f"{name:<8} {side:<9} {run.wall:8.2f} {run.cpu:7.2f} {run.wall / pages:7.3f}  "
              f"{run.cer:7.4f} {run.lines:5d}   {stages}")  # fmt: skip
    detect = peer.stages["det"] / max(ours.stages["detect"], 1e-9)
    recognise = peer.stages["rec"] / max(ours.stages["recognise"], 1e-9)
    print(f"{name:<8} {'ratio':<9} {peer.wall / ours.wall:7.2f}x {peer.cpu / ours.cpu:6.2f}x "
          f"{'':7}  CER {'no worse' if ours.cer <= peer.cer else 'WORSE'}"
          f"        detect {detect:.2f}x  recognise {recognise:.2f}x", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=8, help="upright drawn pages")
    parser.add_argument("--turned", type=int, default=3, help="pages turned 90/180/270")
    parser.add_argument("--rounds", type=int, default=2, help="whole-process rounds per side")
    parser.add_argument("--models", choices=["v6", "v4"], help="default: the newest installed")
    parser.add_argument("--runner", choices=["onnxruntime", "openvino", "vaiml"],
                        default="onnxruntime", help="copyless-ocr's engine (its default: "
                        "onnxruntime, as RapidOCR's)")  # fmt: skip
    parser.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="copyless-ocr's --precision (bf16: OpenVINO's BF16 arithmetic)",
    )
    parser.add_argument(
        "--angle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="both sides with the angle classifier (default, both sides' own)",
    )
    parser.add_argument("--keep", metavar="DIR", help="write the pages and outputs here")
    args = parser.parse_args(argv)
    installed = installed_generations()
    if not installed or (args.models and args.models not in installed):
        print("error: the PP-OCR models are not installed (pip install rapidocr)", file=sys.stderr)
        return 2
    args.models = args.models or installed[0]
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; "
          f"models {args.models}, copyless-ocr --runner {args.runner} --precision "
          f"{args.precision}, "
          f"angle classifier {'on' if args.angle else 'off'} on both sides")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="copyless-ocr-bench-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        sets = {"upright": (root / "upright", args.pages, False),
                "turned": (root / "turned", args.turned, True)}  # fmt: skip
        truths = {}
        for k, (name, (folder, count, turned)) in enumerate(sets.items()):
            if count > 0:
                truths[name] = _write_pages(folder, count, turned, 100 * k)
        first = root / "first"
        first_truth = _write_pages(first, 1, False, 900)
        for side in ("copyless", "rapidocr"):  # compile and cache every shape; not timed
            _run(side, first, first_truth, args, root)
            for name in truths:
                _run(side, sets[name][0], truths[name], args, root)
        print(f"{'set':<8} {'side':<9} {'process':>8} {'cpu s':>7} {'s/page':>7}  "
              f"{'CER':>7} {'lines':>5}   stage seconds summed over the pages")  # fmt: skip
        for name, truth in truths.items():
            runs: dict[str, list[Run]] = {"copyless": [], "rapidocr": []}
            for r in range(args.rounds):
                for side in ("copyless", "rapidocr") if r % 2 == 0 else ("rapidocr", "copyless"):
                    runs[side].append(_run(side, sets[name][0], truth, args, root))
            _print_set(name, len(truth), _median(runs["copyless"]), _median(runs["rapidocr"]))
        ours_first = statistics.median(_ours(first, root / "f.json", args)[0]
                                       for _ in range(args.rounds))  # fmt: skip
        peer_first = statistics.median(_peer(first, root / "g.json", args)[0]
                                       for _ in range(args.rounds))  # fmt: skip
        print(
            f"first answer (one page, whole process): copyless {ours_first:.2f} s, "
            f"rapidocr {peer_first:.2f} s, ratio {peer_first / ours_first:.2f}x"
        )
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
