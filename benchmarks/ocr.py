"""OCR end to end: copyless's OcrPipeline against RapidOCR's own pipeline on the same PP-OCR
models, side by side in one run, on both engines.

    copyless-bench ocr [--pages N] [--rounds N] [--models v6|v4] [--engines onnxruntime,openvino]
                       [--no-angle]

Pages: N drawn pages (827 x 1169, 12 lines of several sizes and colours on tinted paper, drawn
with PIL) and ``skimage.data.page()``, written as PNG files into a temporary folder. The peer
is RapidOCR 3.x (``rapidocr``) for the v6 models, ``rapidocr_onnxruntime`` for v4, as a user
calls it (``RapidOCR()(path)``: default config, onnxruntime, angle classifier on) on every
row; ``--peer-engine openvino`` runs the v6 peer on its OpenVINO engine on the OpenVINO
row. Both sides run the angle classifier, as both do by default; ``--no-angle`` runs both
without it (RapidOCR's ``use_cls=False``, copyless's ``--no-angle``). The table's ``cls``
column says which.

Columns: lines read, character error rate against the drawn text (drawn pages only), the
share of lines whose text equals the peer's, then seconds per page: ``process`` is the wall
time of one whole process over the folder (``copyless-ocr -i DIR`` against a ``python -c``
running the peer over the folder; compiled models already cached, as after a first run)
divided by the pages; ``steady`` the median per page in one warm process, the two
alternating page by page (``--rounds`` rounds). Ratios are peer / copyless (> 1: copyless
faster). The load average is printed: these machines are shared, compare ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import skimage.data
from PIL import Image

import copyless as cl
from copyless.ocr import OcrPipeline, draw_page, installed_generations

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from ocr_helpers import cer, same_lines

PAGE = (827, 1169)

_PEER_SCRIPT = """
import sys, time, contextlib, io
from pathlib import Path
generation, engine, folder, angle = sys.argv[1:5]
use_cls = angle == "yes"
with contextlib.redirect_stdout(io.StringIO()):
    if generation == "v6":
        from rapidocr import RapidOCR, EngineType
        params = {"Global.log_level": "error", "Global.use_cls": use_cls}
        if engine == "openvino":
            for part in ("Det", "Rec", "Cls"):
                params[part + ".engine_type"] = EngineType.OPENVINO
        ocr = RapidOCR(params=params)
    else:
        from rapidocr_onnxruntime import RapidOCR
        ocr = RapidOCR(use_cls=use_cls)
for path in sorted(Path(folder).glob("*.png")):
    ocr(str(path))
"""


def _peer(generation: str, engine: str, angle: bool) -> object:
    with contextlib.redirect_stdout(io.StringIO()):
        if generation == "v6":
            from rapidocr import EngineType, RapidOCR

            params: dict[str, object] = {"Global.log_level": "error", "Global.use_cls": angle}
            if engine == "openvino":
                for part in ("Det", "Rec", "Cls"):
                    params[f"{part}.engine_type"] = EngineType.OPENVINO
            return RapidOCR(params=params)
        from rapidocr_onnxruntime import RapidOCR as RapidOCRv4

        return RapidOCRv4(use_cls=angle)


def _peer_lines(peer: object, generation: str, path: Path) -> list[tuple[tuple[int, ...], str]]:
    from ocr_helpers import PeerLine

    out = peer(str(path))  # type: ignore[operator]
    rows = []
    if generation == "v6":
        if out.boxes is not None:
            rows = list(zip(out.boxes, out.txts, strict=True))
    else:
        rows = [(np.asarray(b), t) for b, t, _ in (out[0] or [])]
    lines = []
    for quad, text in rows:
        q = np.asarray(quad, dtype=float)
        box = (int(q[:, 0].min()), int(q[:, 1].min()), int(q[:, 0].max()), int(q[:, 1].max()))
        lines.append(PeerLine(box, str(text), 1.0))
    return lines


def _write_pages(folder: Path, count: int) -> dict[Path, tuple[str, ...] | None]:
    truth: dict[Path, tuple[str, ...] | None] = {}
    for seed in range(count):
        page = draw_page(seed, size=PAGE)
        path = folder / f"page{seed:02d}.png"
        Image.fromarray(page.image).save(path)
        truth[path] = page.lines
    path = folder / "skimage_page.png"
    Image.fromarray(skimage.data.page()).save(path)
    truth[path] = None
    return truth


def _process_seconds(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _row(generation: str, engine: str, truth: dict[Path, tuple[str, ...] | None],
         folder: Path, rounds: int, peer_engine_follows: bool, angle: bool) -> None:  # fmt: skip
    runner = cl.RunnerType.OPENVINO if engine == "openvino" else cl.RunnerType.ONNXRUNTIME
    peer_engine = engine if peer_engine_follows else "onnxruntime"
    peer = _peer(generation, peer_engine, angle)
    paths = list(truth)
    with OcrPipeline(generation, runner_type=runner, angle=angle) as ocr:
        ours = {p: ocr.read(p) for p in paths}  # warm: compiles and opens every shape
        theirs = {p: _peer_lines(peer, generation, p) for p in paths}
        drawn = [p for p in paths if truth[p] is not None]
        our_cer = statistics.mean(cer(list(truth[p] or ()), [ln.text for ln in ours[p].lines])
                                  for p in drawn)  # fmt: skip
        peer_cer = statistics.mean(cer(list(truth[p] or ()), [ln.text for ln in theirs[p]])
                                   for p in drawn)  # fmt: skip
        same = union = 0
        for p in paths:
            s, u = same_lines([(ln.box, ln.text) for ln in ours[p].lines], theirs[p])
            same, union = same + s, union + u
        ours_t: list[float] = []
        peer_t: list[float] = []
        for _ in range(rounds):
            for p in paths:
                t = time.perf_counter()
                ocr.read(p)
                ours_t.append(time.perf_counter() - t)
                t = time.perf_counter()
                peer(str(p))  # type: ignore[operator]
                peer_t.append(time.perf_counter() - t)
    exe = [sys.executable, "-m", "copyless.apps.ocr", "-i", str(folder), "--models", generation,
           "--runner", engine, "--angle" if angle else "--no-angle"]  # fmt: skip
    cls = "yes" if angle else "no"
    peer_cmd = [sys.executable, "-c", _PEER_SCRIPT, generation, peer_engine, str(folder), cls]
    ours_p = _process_seconds(exe) / len(paths)
    peer_p = _process_seconds(peer_cmd) / len(paths)
    ours_s, peer_s = statistics.median(ours_t), statistics.median(peer_t)
    lines = sum(len(r.lines) for r in ours.values())
    peer_lines = sum(len(v) for v in theirs.values())
    row = (
        f"{generation:<3} {engine:<11} {len(paths):>5} {lines:>4}/{peer_lines:<4} "
        f"{our_cer:>7.4f}/{peer_cer:<7.4f} {same / union:>6.1%} "
        f"{ours_p:>7.3f}/{peer_p:<7.3f} {peer_p / ours_p:>5.2f}x "
        f"{ours_s:>7.3f}/{peer_s:<7.3f} {peer_s / ours_s:>5.2f}x   {cls}/{cls}  {peer_engine}"
    )
    print(row, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="copyless-bench ocr", description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=6, help="drawn pages (plus skimage's page)")
    parser.add_argument("--rounds", type=int, default=2, help="steady-state rounds")
    parser.add_argument("--models", choices=["v6", "v4"], help="default: every installed")
    parser.add_argument("--engines", default="onnxruntime,openvino")
    parser.add_argument("--peer-engine", choices=["onnxruntime", "openvino"],
                        default="onnxruntime",
                        help="openvino: the v6 peer runs OpenVINO on the OpenVINO row")  # fmt: skip
    parser.add_argument("--angle", action=argparse.BooleanOptionalAction, default=True,
                        help="both sides with the angle classifier (default)")  # fmt: skip
    args = parser.parse_args(argv)
    generations = [args.models] if args.models else installed_generations()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    print("gen engine      pages lines ours/peer  CER ours/peer   same   "
          "process s/page ratio  steady s/page  ratio   cls ours/peer  peer engine")
    with tempfile.TemporaryDirectory(prefix="copyless-ocr-bench-") as tmp:
        truth = _write_pages(Path(tmp), args.pages)
        for generation in generations:
            for engine in args.engines.split(","):
                # rapidocr_onnxruntime has no OpenVINO engine: its v4 row's peer is onnxruntime
                follows = args.peer_engine == "openvino" and generation == "v6"
                _row(generation, engine, truth, Path(tmp), args.rounds, follows, args.angle)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
