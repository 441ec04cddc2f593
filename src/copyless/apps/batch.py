"""copyless-batch: classify, detect or segment many images on Ray, one Parquet row per image
(the model's task, from its record: a classifier's top-k, a detector's boxes as lists in the
image's pixels, a segmenter's mask classes and their fractions), or, with ``--task ocr``,
read their text: one row per line (``path, line, x0, y0, x1, y1, score, text, error``; a
page without text has no row, an unreadable one a row with its ``error`` and line -1).
Either is a job of :mod:`copyless.ray` (a :class:`~copyless.ray.ClassificationJob`, or a
:class:`~copyless.ray.ReaderJob` of :class:`copyless.ocr.OcrBatchReader` actors) run by the
one driver loop here, written by the ray layer's writers, under the same watchdog, memory
budget and signal handling; ``--task ocr`` takes INPUTs and ``-o`` (no printed rows), its
progress counts lines, and a stopped run's closing line counts the pages with a line.

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
import contextlib
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, Union

from tqdm import tqdm

from ..model import CompiledModel, class_names, load_model
from ..types import CopylessError
from ._checks import (
    UsageError,
    check_model_path,
    check_output,
    check_output_directory,
    model_task,
    task_mismatch,
)
from ._memory import MemoryBudget, add_memory_argument
from ._models import CLASSIFIER, builtin_alias, builtin_model
from ._output import Output, add_output_arguments, progress_wanted
from ._setup import EXIT_USAGE, add_runner_argument, runner_type, say_precision
from ._signals import Interruption

if TYPE_CHECKING:
    from ..ray import (
        ClassificationJob,
        ClusterInfo,
        JobControl,
        JobSettings,
        Manifest,
        PartitionedWriter,
        ReaderJob,
        ResultWriter,
    )

EXIT_FAILED = 1
PROG = "copyless-batch"
#: The built-in classifier's compiled batch size (frames per engine call).
BUILTIN_BATCH = 8
#: --stall-timeout's default (as copyless.ray's watchdog; not imported: the ray extra).
STALL_S = 120.0
#: Memory a local Ray takes before any actor (its raylet, GCS and workers: ~1 GB measured),
#: and each actor with its runner and pipeline (the built-in classifier at batch 8: ~0.4 GB).
RAY_BASE = 1 << 30
ACTOR_BASE = 512 << 20
#: Images an actor decodes at once (its pipeline's slots: in flight + 1).
DECODES_PER_ACTOR = 3


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
        return _run(args, paths, work, interrupted)
    except KeyboardInterrupt:  # Ctrl-C before the handlers, or after them
        interrupted.note(signal.SIGINT)
        return interrupted.exit_code(EXIT_FAILED)


@dataclass(frozen=True)
class _Work:
    """What the run does: ``job(paths, settings, gpus)`` builds its ray job once the cluster
    is up; its rows are written as ``labels``/``task``/``schema`` say (see
    :func:`copyless.ray.result_table`); ``record`` names a row in ``--json`` and what the
    progress bar counts."""

    job: Callable[[Sequence[str] | Manifest, JobSettings, float], ClassificationJob | ReaderJob]
    labels: list[str] = field(default_factory=list)
    task: str | None = None
    schema: Any = None
    record: str = "image"


def _classifying(args: argparse.Namespace) -> _Work:
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

    return _Work(job, labels, task)


def _reading(args: argparse.Namespace) -> _Work:
    """``--task ocr``: OcrBatchReader actors (the models checked here, before Ray)."""
    from ..ocr import OcrBatchReader, OcrModels, line_schema
    from ..ray import ReaderJob

    OcrModels.load()  # no PP-OCR package, or a broken one: a usage error, before Ray
    options = {} if args.device == "cpu" else {"device": args.device}

    def job(paths: Sequence[str] | Manifest, settings: JobSettings, gpus: float) -> ReaderJob:
        kwargs = {"runner_type": settings.runner_type, "options": options,
                  "max_image_bytes": settings.max_image_bytes}  # fmt: skip
        return ReaderJob(paths, OcrBatchReader, kwargs, settings, gpus)

    return _Work(job, schema=line_schema(), record="line")


def _run(
    args: argparse.Namespace,
    paths: Sequence[str] | Manifest,
    work: _Work,
    interrupted: Interruption,
) -> int:
    from ..ray import JobControl, JobSettings

    try:
        per_image = _image_budget(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    settings = JobSettings(
        actors=args.actors,
        batch_size=args.batch_size,
        top_k=args.top,
        runner_type=runner_type(args),
        device=args.device,
        stall_s=args.stall_timeout,
        max_image_bytes=per_image,
        task=work.task,
    )
    out = Output.from_args(args)
    try:  # before Ray starts: an output that cannot be written fails at once
        writer = _writer(args.output, work, out)
    except OSError as exc:
        print(f"error: cannot write {args.output}: {_reason(exc)}", file=sys.stderr)
        return EXIT_USAGE
    _quiet_ray_logging()
    control = JobControl()
    closing = ""
    with _native_stderr() as (terminal, log), interrupted:
        interrupted.on_signal(control.stop)  # before Ray is up: the job never starts
        try:
            closing = _drive(args, paths, work, settings, writer, terminal, control,
                             interrupted, out)  # fmt: skip
            closing = _finish(writer, closing, interrupted.interrupted, work.record)
        except SystemExit as exc:  # Ray's own SIGTERM handler, before ours took over
            if exc.code != signal.SIGTERM:
                raise
            interrupted.note(signal.SIGTERM)
            closing = _finish(writer, "", True, work.record)
        except Exception as exc:  # noqa: BLE001 - reported in one line, the rows kept
            print(f"error: {_failure(exc, args.output)}; {_keep(writer)}", file=terminal)
            log.keep = not isinstance(exc, CopylessError | OSError)
            return EXIT_FAILED
        except KeyboardInterrupt:  # a second signal: stop at once, keep what is written
            interrupted.note(signal.SIGINT)
            closing = _finish(writer, "", True, work.record)
    out.say(closing)
    if work.schema is None:
        out.summary(images=writer.rows, unreadable=writer.errors, output=args.output)
    else:
        out.summary(images=len(paths) if isinstance(paths, Sequence) else None,
                    lines=writer.rows, unreadable=writer.errors, output=args.output)  # fmt: skip
    return interrupted.exit_code(0)


def _image_budget(args: argparse.Namespace) -> int:
    """The memory one decoded image may take in this run: what the run may use (see
    :mod:`._memory`) less Ray's and the actors' own, shared by the images the actors decode
    at once. Raises UsageError (one line) when Ray and the actors alone are too much."""
    budget = MemoryBudget.of(args.max_memory)
    actors = int(args.actors)
    fixed = RAY_BASE + actors * ACTOR_BASE
    fits = max(0, (budget.limit - RAY_BASE) // ACTOR_BASE)
    lower = f"--actors {fits} fits" if fits >= 1 else "no --actors fits"
    budget.check(fixed, f"Ray with {actors} actor(s)", lower)
    return max(1, (budget.limit - fixed) // (actors * DECODES_PER_ACTOR))


def _finish(writer: Writer, closing: str, stopped: bool, record: str = "image") -> str:
    """Commit the output (after a signal: the rows finished, if any); the summary line."""
    if stopped and writer.rows == 0:
        writer.abort()
        return "stopped before any batch finished: no output written"
    writer.commit()
    return closing or f"{writer.rows} {record}s written before the stop"


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


def _writer(output: str | None, work: _Work, out: Output) -> Writer:
    from ..ray import PartitionedWriter, ResultWriter

    if output is None:
        return _PrintWriter(work.labels, out, work.task)
    if output.endswith(("/", os.sep)) or os.path.isdir(output):
        return PartitionedWriter(output, work.labels, work.task, schema=work.schema)
    return ResultWriter(output, work.labels, work.task, schema=work.schema)


class _PrintWriter:
    """No ``-o``: each image's row printed (``PATH: ID LABEL SCORE``, or a JSON object),
    nothing written; the writers' interface."""

    def __init__(self, labels: list[str], out: Output, task: str | None = None) -> None:
        self.labels, self.out, self.task = labels, out, task
        self.rows = self.errors = 0

    def write(self, batch: dict[str, Any]) -> int:
        from ..ray import result_table

        table = result_table(batch, self.labels, self.task)
        for row in table.to_pylist():
            if row["error"] is not None:
                self.out.say(f"{row['path']}: error: {row['error']}")
            else:
                self.out.say(f"{row['path']}: {_row_line(row)}")
            self.out.record("image", **_row_fields(row))
        self.rows += table.num_rows
        self.errors += table.num_rows - table.column("error").null_count
        return int(table.num_rows)

    def commit(self) -> str:
        return "stdout"

    def abort(self) -> None:
        """Nothing to remove: the rows were printed."""


def _row_line(row: dict[str, Any]) -> str:
    """An image's line: ``ID LABEL SCORE`` (classify), ``K boxes: LABEL SCORE [x0 y0 x1
    y1], ...`` (detect), ``LABEL FRACTION, ...`` (segment)."""
    if "boxes" in row:
        boxes = [f"{label} {score:.3f} [{' '.join(f'{v:.1f}' for v in box)}]"
                 for box, score, label in zip(row["boxes"], row["scores"], row["labels"],
                                              strict=True)]  # fmt: skip
        return f"{len(boxes)} boxes" + (": " + ", ".join(boxes) if boxes else "")
    if "fractions" in row:
        return ", ".join(f"{label} {fraction:.3f}" for label, fraction in
                         zip(row["labels"], row["fractions"], strict=True))  # fmt: skip
    return f"{row['class_id']} {row['label']} {row['score']:.3f}"


def _row_fields(row: dict[str, Any]) -> dict[str, Any]:
    """A result row's JSON fields, the float32 scores and fractions rounded to 4 decimals
    (box corners to 0.1 px)."""
    if row.get("score") is not None:
        row["score"] = round(row["score"], 4)
        row["top_scores"] = [round(score, 4) for score in row["top_scores"]]
    for key in ("scores", "fractions"):
        if row.get(key) is not None:
            row[key] = [round(v, 4) for v in row[key]]
    if row.get("boxes") is not None:
        row["boxes"] = [[round(v, 1) for v in box] for box in row["boxes"]]
    return row


Writer = Union["ResultWriter", "PartitionedWriter", _PrintWriter]


def _failure(exc: Exception, output: str | None) -> str:
    if isinstance(exc, OSError):  # the output: a full disk, a vanished directory
        return f"cannot write {output}: {_reason(exc)}"
    if isinstance(exc, CopylessError):
        return str(exc)
    return f"the run failed: {_last_line(exc)}"


def _keep(writer: Writer) -> str:
    """Keep the rows a failed run finished, where they can be kept; say what was kept."""
    from ..ray import PartitionedWriter

    if writer.rows == 0:
        writer.abort()
        return "no output written"
    if isinstance(writer, _PrintWriter):
        return f"{writer.rows} rows printed"
    if isinstance(writer, PartitionedWriter):
        return f"{writer.rows} rows kept in {writer.parts} part(s) under {writer.commit()}"
    try:
        path = writer.commit()
    except (OSError, ValueError) as exc:  # ValueError: its own commit was what failed
        reason = _reason(exc) if isinstance(exc, OSError) else "the file could not be finished"
        return f"no output written ({reason}; -o DIR/ keeps each finished batch)"
    return f"{writer.rows} rows kept in {path}"


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _drive(
    args: argparse.Namespace,
    paths: Sequence[str] | Manifest,
    work: _Work,
    settings: JobSettings,
    writer: Writer,
    terminal: TextIO,
    control: JobControl,
    interrupted: Interruption,
    out: Output,
) -> str:
    """Run the job into ``writer`` with a progress bar (on a terminal); return the closing
    line (the timings go to ``out``'s summary)."""
    from ..ray import gpus_per_actor, node_cpus, plan_resources, result_table

    started = time.perf_counter()
    with _cluster(args.address, args.actors) as cluster:
        plan = plan_resources(
            settings.actors,
            node_cpus(),
            cpus_per_actor=settings.cpus_per_actor,
            decode_cpus=settings.decode_cpus,
        )
        if plan.note:
            print(f"note: {plan.note}", file=terminal)
        settings = settings.planned(plan)
        job = work.job(paths, settings, gpus_per_actor(settings, cluster))
        ready = time.perf_counter()
        images = len(paths) if isinstance(paths, Sequence) else None
        total, unit = (images, "img") if work.schema is None else (None, " lines")
        bar = tqdm(total=total, unit=unit, file=terminal, dynamic_ncols=True, leave=False,
                   disable=not progress_wanted(terminal))  # fmt: skip
        tee = out.json_lines and not isinstance(writer, _PrintWriter)
        pages: set[str] = set()  # the pages with a row (of lines), for a stopped run's count
        with bar, _over_ray(interrupted, control):  # a second signal ends the loop here
            for batch in job.run(control) if not control.stopped else ():
                bar.update(writer.write(batch))
                if work.schema is not None:
                    pages.update(str(path) for path in batch["path"])
                rows = result_table(batch, work.labels, work.task, schema=work.schema)
                for row in rows.to_pylist() if tee else ():
                    out.record(work.record, **(_row_fields(row) if work.schema is None else row))
        seconds = max(time.perf_counter() - ready, 1e-6)
    where = "local Ray" if cluster.local else f"cluster {cluster.address}"
    errors = f" ({writer.errors} unreadable)" if writer.errors else ""
    if work.schema is not None:  # lines: the INPUTs, or (stopped) the pages with a line
        images = len(pages) if control.stopped or images is None else images
        out.timing([], {"seconds": round(seconds, 3), "startup_s": round(ready - started, 3)})
        return (f"{images} images{errors}, {writer.rows} lines in {seconds:.2f} s "
                f"({job.actors} actor(s) on {where}) -> {args.output}")  # fmt: skip
    out.timing([], {"seconds": round(seconds, 3), "startup_s": round(ready - started, 3),
                    "images_per_second": round(writer.rows / seconds, 3)})  # fmt: skip
    return (
        f"{writer.rows} images{errors} in {seconds:.2f} s, {writer.rows / seconds:.1f} images/s "
        f"({job.actors} actor(s) on {where}, up in {ready - started:.1f} s) -> {args.output}"
    )


@contextlib.contextmanager
def _over_ray(interrupted: Interruption, control: JobControl) -> Iterator[None]:
    """Our SIGINT/SIGTERM handlers over the one ``ray.init`` installs (SIGTERM: exit at
    once) for the run: a signal stops the job's sources and is recorded in ``interrupted``
    (which prints the line and gives the exit status)."""
    inner = Interruption()
    with inner:
        inner.on_signal(control.stop)
        inner.on_signal(lambda: interrupted.note(inner.signal or signal.SIGINT))
        yield
    if inner.signal is not None:  # a second signal arrives as KeyboardInterrupt
        interrupted.note(inner.signal)


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


def _cluster(address: str | None, actors: int) -> AbstractContextManager[ClusterInfo]:
    from ..ray import join_cluster, local_ray

    if address:
        return join_cluster(address)
    # Actors reserve one CPU each: leave at least one logical CPU to the decode tasks.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return local_ray(num_cpus=max(cores or 1, actors + 1))


def _quiet_ray_logging() -> None:
    """Ray's own lines (cluster start, dataset plans, "progress bars disabled") are not
    the app's output; Ray Data's failures still reach the user as the run's error."""
    logging.getLogger("ray").setLevel(logging.WARNING)
    logging.getLogger("ray.data").setLevel(logging.ERROR)


@dataclass
class _Log:
    path: Path
    keep: bool = False


@contextlib.contextmanager
def _native_stderr() -> Iterator[tuple[TextIO, _Log]]:
    """Send file descriptor 2 to a log file for the run; yield a stream on the terminal.

    Ray's C++ core writes its log lines (a nag for every Ray Data actor pool, actor
    restarts) straight to the driver's fd 2, and the Ray processes started here inherit it:
    they go to the log, which is deleted at the end unless the run failed (its path is
    then printed). Python's ``sys.stderr`` keeps writing to the terminal meanwhile.
    """
    fd, name = tempfile.mkstemp(prefix="copyless-batch-", suffix=".log")
    log = _Log(Path(name))
    sys.stderr.flush()
    saved = os.dup(2)
    terminal = os.fdopen(os.dup(saved), "w", buffering=1)
    previous, sys.stderr = sys.stderr, terminal
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield terminal, log
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        sys.stderr = previous
        if log.keep:
            print(f"Ray's log: {log.path}", file=terminal)
        else:
            log.path.unlink(missing_ok=True)
        terminal.close()


def _last_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


__all__ = ["BUILTIN_BATCH", "InputError", "expand_inputs", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
