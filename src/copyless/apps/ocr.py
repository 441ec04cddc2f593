"""copyless-ocr: read the text lines of page images (PP-OCR, zero-copy between the models).

Examples::

    copyless-ocr -i page.png
    copyless-ocr -i scans/ -o annotated/ --json-file lines.json --runner openvino
    copyless-ocr -i scans/ --json | jq .
    copyless-ocr -i photo.jpg --no-angle -n 5

Per image an ``image: PATH`` line, then one ``line: X0 Y0 X1 Y1 SCORE TEXT`` per text line in
reading order (top to bottom, then left to right; the box is the line's axis-aligned bound in
image pixels), then the benchmark block: ``decode``, ``detect``, ``crops``, ``recognise`` and
``total`` in ``x.xxx ms / image`` (medians over ``-n`` runs of every image, after one warm-up
run when ``-n`` > 1). An image that cannot be read (or whose model run fails) prints
``error: REASON`` after its ``image:`` line, and the others go on. Each image is printed as
it is done, then one closing line, ``N images (K unreadable) in S s, R images/s`` (as
copyless-batch's). ``-o`` draws each image's boxes and text into a PNG (a file for one image,
else a directory); ``--json-file OUT.json`` writes the same lines and times as one JSON
document (an ``error`` for a failed image). ``--json`` prints JSON lines on stdout instead of
the human lines, as every app does (:mod:`._output`): one ``image`` object per image, then a
``summary``; ``--json OUT.json``, its older form, still writes the file. ``--quiet`` leaves
out the stage times.

Images are read as every copyless app reads them (:func:`copyless.vision.decode`: EXIF
orientation applied, 16-bit and float samples scaled, any format Pillow opens); a folder
is listed by the apps' one rule (:func:`copyless.vision.image_files`: recursive, each file
with an image suffix, every other entry named on stderr as ``skipped PATH: WHY``). The
angle classifier runs by default, as RapidOCR's does: each line is read the way up it
stands, pages turned 90, 180 or 270 degrees included (``--no-angle`` skips it).

The models are PP-OCRv6 from ``rapidocr`` 3.x where it is installed, else PP-OCRv4 from
``rapidocr-onnxruntime`` (``--models v4|v6`` chooses); each is compiled once per input shape
and cached. They run on onnxruntime, as RapidOCR's do, unless ``--runner`` names another
engine (``vaiml``: the one measured fastest, measured once per model, not per page size);
``--precision bf16`` runs them on OpenVINO's BF16 arithmetic (faster on CPUs with
AVX512-BF16 or AMX; answers may differ a little from fp32).

Exit status 0; 1 when any image failed (the others' results still printed and
written); 2 for bad arguments, no image at a path, or missing models (one ``error:`` line
on stderr); 130 / 143 after SIGINT / SIGTERM: the images taken are finished, printed and
written, then the closing line and one ``stopped by`` line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..ocr import OcrError, OcrPipeline, OcrResult, installed_generations
from ..types import CopylessError, OptionError, RunnerType
from ..vision import ReadLimit
from ._memory import MemoryBudget, add_memory_argument
from ._ocr_draw import draw_lines
from ._output import Output
from ._setup import EXIT_USAGE, add_runner_argument, runner_options, runner_type
from ._signals import Interruption

_STAGES = ("decode", "detect", "crops", "recognise", "total")
#: copyless-ocr's own peak with its models loaded (one drawn page: 1.5 GB on onnxruntime,
#: 0.9 GB on OpenVINO, measured with /usr/bin/time), and the pages it holds at once.
OCR_BASE = 2 << 30
#: the page recognised, one detected and queued, one waiting to queue, the detector's two slots
PAGES_IN_FLIGHT = 5
EXIT_FAILED = 1


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
    # --json is every app's flag (JSON lines on stdout); --json OUT.json, the older form,
    # still writes the file as --json-file does
    parser.add_argument("--json", dest="json_lines", nargs="?", const=True, default=False,
                        metavar="OUT.json", help="print one JSON object a line on stdout (an "
                        "'image' object per image, then a 'summary') instead of the human "
                        "lines; with a file name (the older form) write --json-file")  # fmt: skip
    parser.add_argument("--json-file", metavar="OUT.json",
                        help="write the lines and times as one JSON document")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="leave out the stage times")
    parser.add_argument("-n", "--runs", type=int, default=1, help="timed runs per image")
    parser.add_argument("--angle", action=argparse.BooleanOptionalAction, default=True,
                        help="run the angle classifier (default): lines read the way up they "
                        "stand, turned pages included; --no-angle skips it")  # fmt: skip
    parser.add_argument("--models", choices=["v6", "v4"],
                        help="PP-OCR generation (default: the newest installed)")  # fmt: skip
    # onnxruntime, as OcrPipeline's own default and RapidOCR's: vaiml would measure both
    # engines for every detector input size (a new compiled model per page size)
    add_runner_argument(parser, RunnerType.ONNXRUNTIME,
                        ": vaiml measures the engines once per page size")  # fmt: skip
    parser.set_defaults(runner=None)  # none named: onnxruntime, or OpenVINO for bf16
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="arithmetic: fp32 (default: the models' own, RapidOCR's); bf16 "
                        "runs every model on OpenVINO's BF16 arithmetic (CPUs with AVX512-BF16 "
                        "or AMX; about 2x faster detection there; answers may differ a "
                        "little)")  # fmt: skip
    add_memory_argument(parser)
    return parser


def _images(inputs: Sequence[str]) -> list[Path]:
    """The images the inputs name (the apps' one folder rule); what a folder holds that is
    not taken is named on stderr, one ``skipped`` line each."""
    from ..vision import image_files

    found = image_files(inputs)
    for line in found.skipped_lines():
        print(line, file=sys.stderr)
    return list(found.paths)


@dataclass(slots=True)
class _ImageRuns:
    """One image's runs: its results (timed runs only), or why its last run failed."""

    path: Path
    results: list[OcrResult] = field(default_factory=list)
    error: str | None = None

    @property
    def result(self) -> OcrResult:
        return self.results[-1]

    def medians(self) -> dict[str, float]:
        return {s: statistics.median(getattr(r.times, s) for r in self.results) for s in _STAGES}


def _print(out: Output, page: _ImageRuns) -> None:
    out.say(f"image: {page.path}")
    if page.error is not None:
        out.say(f"error: {page.error}", flush=True)
        out.record("image", image=str(page.path), error=page.error)
        return
    for line in page.result.lines:
        x0, y0, x1, y1 = line.box
        out.say(f"line: {x0} {y0} {x1} {y1} {line.score:.3f} {line.text}")
    ms = {stage: round(seconds * 1e3, 3) for stage, seconds in page.medians().items()}
    if not out.quiet:
        out.say(*(f"{stage:<10} {value:9.3f} ms / image" for stage, value in ms.items()))
    timing = {} if out.quiet else {"ms_per_image": ms}
    out.record("image", image=str(page.path), height=page.result.size[0],
               width=page.result.size[1], lines=[line.as_dict() for line in page.result.lines],
               error=None, **timing)  # fmt: skip
    out.stream.flush()  # a page at a time: what was printed stays when the run is stopped


def _read(
    ocr: OcrPipeline, paths: list[Path], runs: int, out: Output
) -> tuple[list[_ImageRuns], float]:
    """Every image ``runs`` times (pages overlapped), after a warm-up pass when runs > 1;
    each image printed once its last run is done. Returns the images done (all of them,
    unless the run was stopped) and the seconds the last pass took."""
    pages = [_ImageRuns(path) for path in paths]
    passes = runs + 1 if runs > 1 else 1
    done: list[_ImageRuns] = []
    started = 0.0
    for number in range(passes):
        started = time.perf_counter()
        for read in ocr.map(paths):
            page = pages[read.index]
            page.error = None if read.error is None else str(read.error).splitlines()[0]
            if read.error is None and (runs == 1 or number > 0):  # the warm-up is not timed
                page.results.append(read.value)
            if number == passes - 1:
                _print(out, page)
                done.append(page)
    return done, time.perf_counter() - started


def _page_limit(args: argparse.Namespace) -> ReadLimit:
    """The memory one page may take: what the run may use (:mod:`._memory`) less the models',
    shared by the pages in flight. A page past it is an error line; the others are read.
    Raises UsageError (one line) when the models alone are too much."""
    budget = MemoryBudget.of(args.max_memory)
    budget.check(OCR_BASE, "copyless-ocr with its models", "no smaller setting fits")
    share = (budget.limit - OCR_BASE) // PAGES_IN_FLIGHT
    return ReadLimit(share, f"{budget.source} leaves for one page")


def _write_json(target: str, pages: list[_ImageRuns], models: str) -> None:
    doc: dict[str, Any] = {"models": models, "images": []}
    for page in pages:
        if page.error is not None:
            doc["images"].append({"image": str(page.path), "error": page.error})
            continue
        result = page.result
        doc["images"].append({
            "image": str(page.path), "height": result.size[0], "width": result.size[1],
            "lines": [line.as_dict() for line in result.lines],
            "ms_per_image": {k: round(v * 1e3, 3) for k, v in page.medians().items()},
        })  # fmt: skip
    Path(target).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _draw(out: str, paths: list[Path], pages: list[_ImageRuns]) -> None:
    from ..vision import decode

    target = Path(out)
    single = len(paths) == 1 and target.suffix.lower() == ".png"
    if not single:
        target.mkdir(parents=True, exist_ok=True)
    for page in pages:
        if page.error is None:
            dest = target if single else target / f"{page.path.stem}.png"
            draw_lines(decode(page.path), page.result.lines, dest)


def _closing(pages: list[_ImageRuns], seconds: float) -> str:
    """copyless-batch's closing line: images, the unreadable ones, time and rate."""
    failed = sum(page.error is not None for page in pages)
    errors = f" ({failed} unreadable)" if failed else ""
    rate = len(pages) / seconds if seconds > 0 else 0.0
    return f"{len(pages)} images{errors} in {seconds:.2f} s, {rate:.1f} images/s"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if isinstance(args.json_lines, str):  # --json OUT.json: the older form of --json-file
        args.json_file, args.json_lines = args.json_file or args.json_lines, False
    if args.runs < 1:
        print("error: -n must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    if args.models is not None and args.models not in installed_generations():
        pkg = "rapidocr" if args.models == "v6" else "rapidocr-onnxruntime"
        print(f"error: PP-OCR {args.models} models need `pip install {pkg}`", file=sys.stderr)
        return EXIT_USAGE
    code = EXIT_FAILED  # what a second signal (stop now) leaves: exit_code makes it 130/143
    with Interruption("copyless-ocr") as interrupted:
        code = _run(args, interrupted)
    return interrupted.exit_code(code)


def _engine(args: argparse.Namespace) -> tuple[RunnerType, dict[str, Any]]:
    """The runners' engine and options: ``--precision bf16`` is OpenVINO's BF16 arithmetic
    (onnxruntime has none: an explicit ``--runner onnxruntime`` with it is a usage error)."""
    options = runner_options(args)
    if args.precision == "fp32":
        return (runner_type(args) if args.runner else RunnerType.ONNXRUNTIME), options
    if args.runner == "onnxruntime":
        raise OptionError("--precision bf16 runs on OpenVINO: leave out --runner onnxruntime")
    return RunnerType.OPENVINO, {**options, "inference_precision": "bf16"}


def _run(args: argparse.Namespace, interrupted: Interruption) -> int:
    """Read, print, write; the exit status (a signal's is added by the caller)."""
    out = Output.from_args(args)
    try:
        paths = _images(args.input)
        limit = _page_limit(args)
        engine, options = _engine(args)
        with OcrPipeline(args.models, angle=args.angle, runner_type=engine, options=options,
                         read_limit=limit) as ocr:  # fmt: skip
            interrupted.on_signal(ocr.stop)  # the images taken are finished, then it ends
            pages, seconds = _read(ocr, paths, args.runs, out)
            models = ocr.models.generation
    except OcrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (CopylessError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.json_file:
            _write_json(args.json_file, pages, models)
        if args.output:
            _draw(args.output, paths, pages)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out.say(_closing(pages, seconds), flush=True)
    failed = sum(page.error is not None for page in pages)
    rate = len(pages) / seconds if seconds > 0 else 0.0
    out.timing([], {"seconds": round(seconds, 4), "images_per_second": round(rate, 3)})
    out.summary(images=len(pages), failed=failed, models=models)
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main())
