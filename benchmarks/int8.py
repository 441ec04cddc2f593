"""INT8 against fp32, agreement beside speed, per engine (issue 48).

    python benchmarks/int8.py [--models efficientnet-lite0,resnet50] [--calibration 128]
                        [--test 300] [--rounds 7] [--runs 20] [--max-drop PCT] [--json FILE]

Each model is compiled twice with ``copyless-compile``'s options (RGBx uint8 input, the
zoo's normalisation folded in, ``resize crop:0.875``): fp32, and ``precision="int8"``
calibrated on ``--calibration`` seeded variants of real photos (``_accuracy_data``: crops,
scales 0.5-2.2x, aspect changes, mirror, JPEG quality 65-96; one photo in eight greyscale,
as photo collections hold them). ``--max-drop`` adds accuracy control.

Agreement: ``--test`` other variants (another seed: none calibrated on), resized as
torchvision's Resize(256) + CenterCrop(224) gives them, through a runner of each model on
each engine: top-1 of int8 (its INT8 logits read dequantized, the CPU view) against fp32 on
the same engine, overall and on the crops fp32 is sure of (top-1 probability >= 0.3).
(ResNet-50's weights are random: its figure says how INT8 moves the logits, not how a
trained ResNet-50 fares.)

Speed: one runner per model and engine (onnxruntime, OpenVINO, and ``RunnerType.VAIML``,
the default, which measures both and keeps the faster) on runner-allocated zero-copy
tensors; ``--rounds`` rounds, each running every runner ``--runs`` timed ``execute`` calls
back to back, the order reversed every round; a runner's figure is the median over rounds
of its round medians. Ratios: fp32 / int8 on each engine, and the fastest int8 against the
fastest fp32 (the target: >= 1.8x without VNNI, >= 2.5x with VNNI or AMX). Run it alone:
``/work/shared/tools/quiet python benchmarks/int8.py``.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

import copyless as cl
from _accuracy_data import variants
from copyless.model import load_model, precision_line, precision_of, zoo
from copyless.types import cpu_info

ENGINES = {"onnxruntime": cl.RunnerType.ONNXRUNTIME, "openvino": cl.RunnerType.OPENVINO,
           "vaiml": cl.RunnerType.VAIML}  # fmt: skip
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
SURE = 0.3
#: The zoo models' normalisation (pixel units), as ``copyless-zerocopy`` compiles them.
NORMALISATION = {
    "efficientnet-lite0": ((127.0,) * 3, (128.0,) * 3),
    "resnet50": ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375)),
}


def compile_pair(
    name: str, calibration: Path, max_drop: float | None, out: Path
) -> dict[str, Path]:
    mean, std = NORMALISATION[name]
    view = {"input_format": "rgbx", "mean": mean, "std": std, "resize": "crop:0.875"}
    source = zoo.build(name, progress=False)
    paths = {"fp32": cl.compile_model(source, out / f"{name}-fp32.rai", **view)}
    began = time.perf_counter()
    extra = {} if max_drop is None else {"max_drop": max_drop}
    paths["int8"] = cl.compile_model(source, out / f"{name}-int8.rai", precision="int8",
                                     calibration=calibration, **view, **extra)  # fmt: skip
    print(f"{name}: int8 compiled in {time.perf_counter() - began:.1f} s")
    print(f"  {precision_line(load_model(paths['int8']).metadata)}")
    return paths


def crops(count: int, seed: int) -> list[np.ndarray]:
    """RGBx pixels [224, 224, 4] of ``count`` variants: Resize(256) + CenterCrop(224)."""
    out = []
    for variant in variants(count, seed):
        rgb = Image.open(io.BytesIO(variant.jpeg)).convert("RGB")
        w, h = rgb.size
        size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
        rgb = rgb.resize(size, Image.Resampling.BILINEAR)
        left, top = round((size[0] - 224) / 2), round((size[1] - 224) / 2)
        pixels = np.asarray(rgb.crop((left, top, left + 224, top + 224)), np.uint8)
        out.append(np.concatenate([pixels, np.zeros((224, 224, 1), np.uint8)], axis=2))
    return out


def logits(runner: cl.Runner, images: list[np.ndarray]) -> np.ndarray:
    (x_info,) = runner.get_tensors_info(IN, cl.TensorType.HW)
    (y_info,) = runner.get_tensors_info(OUT, cl.TensorType.CPU)  # dequantized for INT8
    x, y = runner.allocate_npu_tensor(x_info), runner.allocate_npu_tensor(y_info)
    out = []
    for image in images:
        x.numpy()[...] = image[None]
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
        out.append(y.numpy().astype(np.float64).copy())
    return np.concatenate(out)


def agreement(fp32: np.ndarray, int8: np.ndarray) -> dict[str, Any]:
    e = np.exp(fp32 - fp32.max(axis=1, keepdims=True))
    sure = (e / e.sum(axis=1, keepdims=True)).max(axis=1) >= SURE
    same = fp32.argmax(axis=1) == int8.argmax(axis=1)
    return {"top1": round(100.0 * float(same.mean()), 1), "sure_images": int(sure.sum()),
            "top1_sure": round(100.0 * float(same[sure].mean()), 1) if sure.any() else None,
            "images": len(same)}  # fmt: skip


def timed(runner: cl.Runner, runs: int) -> float:
    """The median of ``runs`` timed ``execute`` calls (ms), after one untimed."""
    ins = [runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(IN)]
    outs = [runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(OUT)]
    runner.execute([ins], [outs])
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        runner.execute([ins], [outs])
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3


def one_model(name: str, paths: dict[str, Path], test: list[np.ndarray],
              args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    runners = {(p, e): cl.RunnerFactory.create_runner(paths[p], None, kind)
               for p in ("fp32", "int8") for e, kind in ENGINES.items()}  # fmt: skip
    try:
        agree = {e: agreement(logits(runners["fp32", e], test), logits(runners["int8", e], test))
                 for e in ("onnxruntime", "openvino")}  # fmt: skip
        rounds: dict[tuple[str, str], list[float]] = {key: [] for key in runners}
        order = list(runners)
        for _ in range(args.rounds):
            for key in order:
                rounds[key].append(timed(runners[key], args.runs))
            order.reverse()
        chose = {p: str(runners[p, "vaiml"].get_property("engine")) for p in ("fp32", "int8")}
    finally:
        for runner in runners.values():
            runner.close()
    ms = {f"{p}/{e}": round(statistics.median(r), 3) for (p, e), r in rounds.items()}
    fastest = {p: min(ms[f"{p}/onnxruntime"], ms[f"{p}/openvino"]) for p in ("fp32", "int8")}
    result = {
        "model": name, "agreement": agree, "median_ms": ms, "vaiml_chose": chose,
        "ratio": {e: round(ms[f"fp32/{e}"] / ms[f"int8/{e}"], 2) for e in ENGINES},
        "fastest_ratio": round(fastest["fp32"] / fastest["int8"], 2),
        "record": precision_of(load_model(paths["int8"]).metadata),
    }  # fmt: skip
    print(f"{name}: top-1 as fp32 on {len(test)} other crops")
    for engine, figures in agree.items():
        print(f"  {engine:12s} {figures['top1']:5.1f}% of all, {figures['top1_sure']}% of the "
              f"{figures['sure_images']} fp32 is sure of")  # fmt: skip
    print(f"  median of {args.rounds} alternating rounds x {args.runs} runs (ms):")
    for engine in ENGINES:
        print(f"  {engine:12s} fp32 {ms[f'fp32/{engine}']:8.3f}  int8 {ms[f'int8/{engine}']:8.3f}"
              f"  {result['ratio'][engine]:5.2f}x")  # fmt: skip
    print(f"  fastest int8 vs fastest fp32: {result['fastest_ratio']:.2f}x "
          f"(vaiml chose {chose['fp32']} for fp32, {chose['int8']} for int8)")  # fmt: skip
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="efficientnet-lite0,resnet50")
    parser.add_argument("--calibration", type=int, default=128, help="calibration variants")
    parser.add_argument("--test", type=int, default=300, help="other variants to compare on")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=20, help="timed calls per runner per round")
    parser.add_argument("--max-drop", type=float, help="accuracy control (points of top-1)")
    parser.add_argument("--seed", type=int, default=7, help="calibration seed (test: +19)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.rounds < 5:
        parser.error("--rounds: at least 5 (medians of alternating rounds)")
    cpu = cpu_info()
    vnni = bool(cpu.flags & {"avx512_vnni", "avx_vnni", "amx_int8"})
    print(f"cpu: {cpu.name} ({'VNNI/AMX' if vnni else 'no VNNI'})")
    results = []
    with tempfile.TemporaryDirectory(prefix="copyless-int8-") as tmp:
        folder = Path(tmp) / "calibration"
        folder.mkdir()
        for i, variant in enumerate(variants(args.calibration, args.seed)):
            (folder / f"{i:04d}-{variant.photo}.jpg").write_bytes(variant.jpeg)
        test = crops(args.test, args.seed + 19)
        for name in [m for m in args.models.split(",") if m]:
            paths = compile_pair(name, folder, args.max_drop, Path(tmp))
            results.append(one_model(name, paths, test, args))
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu.name, "vnni": vnni,
                                               "results": results}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
