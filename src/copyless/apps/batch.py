"""copyless-batch: classify, detect or segment many images on Ray, one Parquet row per image
(the model's task, from its record: a classifier's top-k, a detector's boxes as lists in the
image's pixels, a segmenter's mask classes and their fractions), or, with ``--task ocr``,
read their text: one row per line (``path, line, x0, y0, x1, y1, score, text, error``; a
page without text has no row, an unreadable one a row with its ``error`` and line -1).
Either is a job of :mod:`copyless.ray` (a :class:`~copyless.ray.ClassificationJob`, or a
:class:`~copyless.ray.ReaderJob` of :class:`copyless.ocr.OcrBatchReader` actors) run by
the one driver loop (:mod:`._batch_driver`), written by the ray layer's writers, under the
same watchdog, memory budget and signal handling; ``--task ocr`` takes INPUTs and ``-o``
(no printed rows), its progress counts lines, and a stopped run's closing line counts the
pages with a line.

``copyless-batch (INPUT... | --manifest URI [--path-column NAME]) [-o OUT.parquet|DIR/]
[--json] [--quiet] [-m MODEL] [--address ADDR] [--actors N] [--batch-size B]
[--runner onnxruntime|openvino] [--device cpu|cuda|tensorrt] [-k TOP] [--stall-timeout S]``

INPUT: image files, directories or globs, listed by the apps' one rule
(:func:`copyless.vision.image_files`: folders searched recursively for every image suffix
decode reads, JPEG, PNG, WebP, BMP, TIFF, GIF; every other entry named on stderr as
``skipped PATH: WHY``); or a
manifest, a Parquet/CSV column of paths or URIs that Ray's workers read (the driver lists
nothing). With no ``--address`` a private local Ray is started for the run and stopped at
its end (quiet, no dashboard, nothing left outside the cache and temporary directories);
``--address HOST:PORT`` joins a cluster started with ``ray start --head`` (every node must
read the INPUT paths; the model travels through the object store). Before submitting, the
actors and a decode task are fitted to the cluster's CPUs (shrunk with a ``note:`` line,
or refused); a job that makes no progress while Ray cannot place its demands fails after
``--stall-timeout`` with the demand and the cluster's resources. OUT.parquet is written
atomically; DIR/ gets one Parquet file per batch, named by its input paths. A run that
fails keeps the rows it finished (DIR/: every finished part; OUT.parquet: the rows so far,
unless the file itself cannot be finished). Without ``-o`` nothing is written: each image
is a line on stdout, ``PATH: CLASS_ID LABEL SCORE``; ``--json`` prints every row as a JSON
object (``-o`` or not) and a summary (:mod:`._output`); the progress bar is drawn only on a
terminal.

SIGINT or SIGTERM stops the sources: no new batch starts, the batches the actors hold run
to their end and are written, then the summary is printed and the exit status is 130
(SIGINT) or 143 (SIGTERM) with one line on stderr (``copyless-batch: stopped by SIGINT``).
DIR/ then holds a complete Parquet part for every finished batch; OUT.parquet is a
complete file of the rows finished (written atomically; none when no batch had finished).
A second signal stops at once: the batches running are dropped, the rows already written
are kept as above. Exit status otherwise: 0 done (unreadable images are rows with an
``error``), 1 the run failed, 2 bad arguments or model.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..model import CompiledModel, class_names, load_model
from ..types import CopylessError
from ._batch_driver import EXIT_FAILED, BatchWork, run_batch
from ._checks import (
    UsageError,
    check_model_path,
    check_output,
    check_output_directory,
    model_task,
    task_mismatch,
)
from ._memory import add_memory_argument
from ._models import CLASSIFIER, builtin_alias, builtin_model
from ._output import add_output_arguments
from ._setup import EXIT_USAGE, add_runner_argument, say_precision
from ._signals import Interruption

if TYPE_CHECKING:
    from ..ray import ClassificationJob, JobSettings, Manifest, ReaderJob

PROG = "copyless-batch"
#: The built-in classifier's compiled batch size (frames per engine call).
BUILTIN_BATCH = 8
#: --stall-timeout's default (as copyless.ray's watchdog; not imported: the ray extra).
STALL_S = 120.0


class InputError(ValueError):
    """An INPUT that names nothing."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Classify, detect or segment images on Ray (a local one, or a cluster "
        "with --address), one Parquet row per image; or read their text (--task ocr), one "
        "row per line.",
    )
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help="image files, dirs, globs")
    parser.add_argument(
        "--manifest",
        metavar="URI",
        help="a .parquet or .csv file (or directory of them) with a column of image paths or "
        "URIs, read by Ray's workers through pyarrow's filesystems (instead of INPUTs)",
    )
    parser.add_argument(
        "--path-column", default="path", metavar="NAME", help="the manifest's column (path)"
    )
    parser.add_argument(
        "-o",
        "--output",
        help="OUT.parquet (written atomically), or DIR/ (one Parquet file per batch, named by "
        "its input paths: reruns and retries replace files, never add rows); none by "
        "default: a line per image on stdout (a JSON object with --json)",
    )
    parser.add_argument(
        "-m",
        "--model",
        help="a compiled classifier, detector or segmenter with an RGBx input (.rai or "
        "directory; its task from its record) or "
        f"the built-in name {CLASSIFIER} (the default)",
    )
    parser.add_argument("--address", help="HOST:PORT of a `ray start --head` cluster")
    parser.add_argument("--actors", type=int, default=1, help="inference actors (default 1)")
    parser.add_argument("--batch-size", type=int, default=32, help="images per batch (32)")
    add_runner_argument(parser)  # --runner, --device (cuda/tensorrt: the actors take GPUs)
    add_memory_argument(parser)
    parser.add_argument("-k", "--top", type=int, default=5, help="classes per image (5)")
    parser.add_argument("--labels", metavar="FILE", help="class names, one per line, for a "
                        "model of your own (default: the names the model records, or the "
                        "zoo's for a built-in model)")  # fmt: skip
    parser.add_argument("--task", choices=["classify", "detect", "segment", "ocr"],
                        help="what to do with each image (default: the model's task, from "
                        "its record): classify (path, class_id, label, score, top-k), detect "
                        "(path, boxes as [x0, y0, x1, y1] lists in the image's pixels, "
                        "scores, class_ids, labels), segment (path, the mask's class_ids, "
                        "labels, fractions), or ocr (PP-OCR: one row per text line: path, "
                        "line, x0, y0, x1, y1, score, text, error)")  # fmt: skip
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=STALL_S,
        metavar="S",
        help="fail when no batch completes for S seconds while Ray has demands it cannot "
        f"place ({STALL_S:g})",
    )
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    if bool(args.inputs) == bool(args.manifest):
        parser.error("give INPUTs or --manifest (one of them)")
    for flag in ("actors", "batch_size", "top"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    if not args.stall_timeout > 0:
        parser.error("--stall-timeout must be > 0")
    if args.device != "cpu" and args.runner == "openvino":
        parser.error(f"--device {args.device} runs on --runner onnxruntime")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.task == "ocr" and (args.manifest or args.output is None):
            raise UsageError("--task ocr takes INPUTs and -o OUT.parquet or DIR/")
        if args.output is None:
            pass  # the rows are printed
        elif args.output.endswith(("/", os.sep)) or os.path.isdir(args.output):
            check_output_directory(args.output)
        else:
            check_output(args.output, (".parquet", ".pq"), "Parquet")
        # the ray extra, imported once the arguments are good and before any model is built
        from ..ray import Manifest

        if args.manifest:
            manifest = Manifest(args.manifest, args.path_column)
            manifest.check()  # the schema only: the images are listed by Ray's workers
            paths: Sequence[str] | Manifest = manifest
        else:
            paths = expand_inputs(args.inputs)
        work = _reading(args) if args.task == "ocr" else _classifying(args)
    except ImportError as exc:
        print(f"error: copyless-batch needs the ray extra (pip install 'copyless[ray]'): {exc}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    except (InputError, CopylessError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    interrupted = Interruption(PROG)
    try:
        return run_batch(args, paths, work, interrupted)
    except KeyboardInterrupt:  # Ctrl-C before the handlers, or after them
        interrupted.note(signal.SIGINT)
        return interrupted.exit_code(EXIT_FAILED)


def _classifying(args: argparse.Namespace) -> BatchWork:
    """The model's job (classify, detect or segment), the model checked and loaded."""
    from ..ray import ClassificationJob, FrameSpec

    model = load_model(_model_path(args.model))
    task = _job_task(args.model or CLASSIFIER, model, args.task)
    FrameSpec.for_model(model)
    labels = class_names(model, args.labels)
    say_precision(model)

    def job(paths: Sequence[str] | Manifest, settings: JobSettings, gpus: float
            ) -> ClassificationJob:  # fmt: skip
        return ClassificationJob(paths, model, settings, gpus)

    return BatchWork(job, labels, task)


def _reading(args: argparse.Namespace) -> BatchWork:
    """``--task ocr``: OcrBatchReader actors (the models checked here, before Ray)."""
    from ..ocr import OcrBatchReader, OcrModels, line_schema
    from ..ray import ReaderJob

    OcrModels.load()  # no PP-OCR package, or a broken one: a usage error, before Ray
    options = {} if args.device == "cpu" else {"device": args.device}

    def job(paths: Sequence[str] | Manifest, settings: JobSettings, gpus: float) -> ReaderJob:
        kwargs = {"runner_type": settings.runner_type, "options": options,
                  "max_image_bytes": settings.max_image_bytes}  # fmt: skip
        return ReaderJob(paths, OcrBatchReader, kwargs, settings, gpus)

    return BatchWork(job, schema=line_schema(), record="line")


def _job_task(name: str, model: CompiledModel, wanted: str | None) -> str | None:
    """The job's task (None: classify) from the model's record; UsageError (one line) for
    a model of no task this app runs, or one that is not the ``--task`` asked for."""
    task = model_task(model)
    task = "detect" if task in ("face", "layout") else task
    refusal = task_mismatch(name, task, ("classifier", "detect", "segment"))
    if refusal is not None:
        raise UsageError(refusal)
    job = None if task == "classifier" else task
    if (wanted is not None and (wanted == "classify") != (job is None)) or \
            (wanted not in (None, "classify") and wanted != job):  # fmt: skip
        raise UsageError(f"{name} records the task {job or 'classify'}, not {wanted} (--task)")
    return job


def expand_inputs(items: Sequence[str], skipped: TextIO | None = None) -> list[str]:
    """Absolute paths of the images INPUT names, in order, each once, by the apps' one rule
    (:func:`copyless.vision.image_files`); what a folder holds that is not taken is named
    on ``skipped`` (one line each; default stderr). Raises :class:`InputError` for an
    INPUT that names nothing, or no image at all."""
    from ..vision import image_files

    try:
        found = image_files(items)
    except FileNotFoundError as exc:
        raise InputError(str(exc)) from None
    for line in found.skipped_lines():
        print(line, file=skipped or sys.stderr)
    return [os.path.abspath(path) for path in found.paths]


def _model_path(name: str | None) -> Path:
    """``-m``: None or the built-in name -> the built-in classifier; else a compiled model's
    path (checked: it exists, and an ONNX file is refused with the line compiling it)."""
    if name is None or builtin_alias(name, (CLASSIFIER,)) is not None:
        return builtin_batch_classifier()
    return check_model_path(name)


def builtin_batch_classifier() -> Path:
    """The built-in EfficientNet-Lite0 (RGBx input) compiled for :data:`BUILTIN_BATCH`."""
    return builtin_model(CLASSIFIER, batch_size=BUILTIN_BATCH)


__all__ = ["BUILTIN_BATCH", "InputError", "expand_inputs", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
