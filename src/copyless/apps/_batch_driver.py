"""copyless-batch's driver: one loop for every job of the ray layer (classification,
detection, segmentation, or OCR's :class:`~copyless.ray.ReaderJob`): the memory budget, the
cluster (a private local Ray or ``--address``), Ray's fd-2 output sent to a log, our
SIGINT/SIGTERM handlers over Ray's, the progress bar, the ray layer's writers (or the rows
printed) and the closing line. :mod:`.batch` parses the arguments and picks the job.
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

from ..types import CopylessError
from ._checks import UsageError
from ._memory import MemoryBudget
from ._output import Output, progress_wanted
from ._setup import EXIT_USAGE, runner_type
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


#: Memory a local Ray takes before any actor (its raylet, GCS and workers: ~1 GB measured),
#: and each actor with its runner and pipeline (the built-in classifier at batch 8: ~0.4 GB).
RAY_BASE = 1 << 30


ACTOR_BASE = 512 << 20


#: Images an actor decodes at once (its pipeline's slots: in flight + 1).
DECODES_PER_ACTOR = 3


@dataclass(frozen=True, slots=True)
class BatchWork:
    """What the run does: ``job(paths, settings, gpus)`` builds its ray job once the cluster
    is up; its rows are written as ``labels``/``task``/``schema`` say (see
    :func:`copyless.ray.result_table`); ``record`` names a row in ``--json`` and what the
    progress bar counts."""

    job: Callable[[Sequence[str] | Manifest, JobSettings, float], ClassificationJob | ReaderJob]
    labels: list[str] = field(default_factory=list)
    task: str | None = None
    schema: Any = None
    record: str = "image"


def run_batch(
    args: argparse.Namespace,
    paths: Sequence[str] | Manifest,
    work: BatchWork,
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


def _writer(output: str | None, work: BatchWork, out: Output) -> Writer:
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
    work: BatchWork,
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
