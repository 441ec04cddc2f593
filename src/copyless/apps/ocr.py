"""copyless-ocr: read the text lines of page images (PP-OCR, zero-copy between the models).

Examples::

    copyless-ocr -i page.png
    copyless-ocr -i scans/ -o annotated/ --json lines.json --runner openvino
    copyless-ocr -i rotated.jpg --angle -n 5

Per image an ``image: PATH`` line, then one ``line: X0 Y0 X1 Y1 SCORE TEXT`` per text line in
reading order (top to bottom, then left to right; the box is the line's axis-aligned bound in
image pixels), then the benchmark block: ``decode``, ``detect``, ``crops``, ``recognise`` and
``total`` in ``x.xxx ms / image`` (medians over ``-n`` runs of every image, after one warm-up
run when ``-n`` > 1). ``-o`` draws each image's boxes and text into a PNG (a file for one
image, else a directory); ``--json`` writes the same lines and times.

The models are PP-OCRv6 from ``rapidocr`` 3.x where it is installed, else PP-OCRv4 from
``rapidocr-onnxruntime`` (``--models v4|v6`` chooses); each is compiled once per input shape
and cached. Exit status 0, 2 for bad arguments, a missing or undecodable image or missing
models (one ``error:`` line on stderr), 1 when a model run fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..ocr import OcrError, OcrPipeline, OcrResult, installed_generations
from ..types import CopylessError
from ._ocr_draw import draw_lines
from ._setup import EXIT_USAGE, add_runner_argument, runner_options, runner_type

_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".gif"}
_STAGES = ("decode", "detect", "crops", "recognise", "total")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="copyless-ocr",
        description="Read text lines from page images with PP-OCR (detector -> crops -> "
        "recogniser, zero-copy between the models).",
    )
    parser.add_argument("-i", "--input", action="append", required=True, metavar="IMAGE|DIR",
                        help="an image or a folder of images (repeatable)")  # fmt: skip
    parser.add_argument("-o", "--output", metavar="OUT.png|DIR",
                        help="draw boxes and text: a PNG for one image, else a folder")  # fmt: skip
    parser.add_argument("--json", metavar="OUT.json", help="write the lines and times as JSON")
    parser.add_argument("-n", "--runs", type=int, default=1, help="timed runs per image")
    parser.add_argument("--angle", action="store_true",
                        help="run the angle classifier and turn upside-down lines")  # fmt: skip
    parser.add_argument("--models", choices=["v6", "v4"],
                        help="PP-OCR generation (default: the newest installed)")  # fmt: skip
    add_runner_argument(parser)
    return parser


def _images(inputs: Sequence[str]) -> list[Path]:
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES)
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"no image or folder at {item}")
    if not found:
        raise FileNotFoundError(f"no images in {', '.join(inputs)}")
    return found


def _print(path: Path, result: OcrResult, times: dict[str, float]) -> None:
    print(f"image: {path}")
    for line in result.lines:
        x0, y0, x1, y1 = line.box
        print(f"line: {x0} {y0} {x1} {y1} {line.score:.3f} {line.text}")
    for stage in _STAGES:
        print(f"{stage:<10} {times[stage] * 1e3:9.3f} ms / image")


Read = list[tuple[OcrResult, dict[str, float]]]


def _read(ocr: OcrPipeline, paths: list[Path], runs: int) -> Read:
    """Every image ``runs`` times (pages overlapped), after a warm-up pass when runs > 1;
    per image the last result and the median stage times."""
    if runs > 1:
        for _ in ocr.read_all(paths):
            pass
    collected: list[list[OcrResult]] = [[] for _ in paths]
    for _ in range(runs):
        for index, result in enumerate(ocr.read_all(paths)):
            collected[index].append(result)
    out = []
    for results in collected:
        medians = {s: statistics.median(getattr(r.times, s) for r in results) for s in _STAGES}
        out.append((results[-1], medians))
    return out


def _write_json(target: str, paths: list[Path], read: Read,
                models: str) -> None:  # fmt: skip
    doc: dict[str, Any] = {"models": models, "images": []}
    for path, (result, times) in zip(paths, read, strict=True):
        doc["images"].append({
            "image": str(path), "height": result.size[0], "width": result.size[1],
            "lines": [line.as_dict() for line in result.lines],
            "ms_per_image": {k: round(v * 1e3, 3) for k, v in times.items()},
        })  # fmt: skip
    Path(target).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _draw(out: str, paths: list[Path], read: Read) -> None:
    from ..vision import decode

    target = Path(out)
    single = len(paths) == 1 and target.suffix.lower() == ".png"
    if not single:
        target.mkdir(parents=True, exist_ok=True)
    for path, (result, _) in zip(paths, read, strict=True):
        dest = target if single else target / f"{path.stem}.png"
        draw_lines(decode(path), result.lines, dest)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.runs < 1:
        print("error: -n must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    if args.models is not None and args.models not in installed_generations():
        pkg = "rapidocr" if args.models == "v6" else "rapidocr-onnxruntime"
        print(f"error: PP-OCR {args.models} models need `pip install {pkg}`", file=sys.stderr)
        return EXIT_USAGE
    try:
        paths = _images(args.input)
        with OcrPipeline(args.models, angle=args.angle, runner_type=runner_type(args),
                         options=runner_options(args)) as ocr:  # fmt: skip
            read = _read(ocr, paths, args.runs)
            models = ocr.models.generation
    except OcrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (CopylessError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for path, (result, times) in zip(paths, read, strict=True):
        _print(path, result, times)
    try:
        if args.json:
            _write_json(args.json, paths, read, models)
        if args.output:
            _draw(args.output, paths, read)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
