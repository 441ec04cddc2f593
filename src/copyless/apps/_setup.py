"""What the image apps (copyless-zerocopy, copyless-detect) share: their common arguments,
the checks and runner they start from, and the timed preprocess / execute / postprocess loop.

The image is decoded once, outside the timed loop (as in the VART-ML samples); the loop runs
one untimed warm-up and then ``--runs`` timed iterations on the same two tensors. That is
one synchronous image at a time, on purpose (the sample's figures: ``throughput (pipeline)``
is one image's whole round trip), so no :class:`~copyless.Pipeline` overlaps the rounds; the
stages are timed by the pipeline layer's :class:`~copyless.pipeline.StageClock` and printed
by :func:`benchmark_block`. SIGINT / SIGTERM end the loop after the round running
(:func:`run_image_app`): the rounds done are reported, then one ``stopped by`` line, exit
130 / 143.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..model import CompiledModel, precision_line
from ..pipeline import StageClock
from ..runner import Runner, RunnerFactory
from ..types import CopylessError, RunnerType, StatusCode, TensorType
from ..vision import ReadLimit, decode
from ._checks import UsageError, check_model_path
from ._memory import APP_BASE, MemoryBudget, add_memory_argument
from ._models import builtin_alias
from ._output import Output, add_output_arguments
from ._signals import Interruption, held

EXIT_USAGE = 2

#: What an app hands to :func:`run_image_app`: the open runner, the decoded RGB image and
#: the parsed arguments in; the exit status out.
ImageApp = Callable[[Runner, npt.NDArray[np.uint8], argparse.Namespace], int]

_Prepared = TypeVar("_Prepared")
_Result = TypeVar("_Result")

#: The stages :func:`timed_runs` times, as the benchmark block names them.
STAGES = ("preprocess", "infer", "postprocess")


def add_runner_argument(
    parser: argparse.ArgumentParser, default: RunnerType = RunnerType.VAIML, why: str = ""
) -> None:
    """``--runner vaiml|onnxruntime|openvino`` and ``--device cpu|cuda|tensorrt`` (read back
    with :func:`runner_type` and :func:`runner_options`). ``default``: the app's engine when
    none is named (``why``, said in the help, when it is not vaiml)."""
    name = default.name.lower()
    parser.add_argument(
        "--runner",
        choices=[t.name.lower() for t in RunnerType],
        default=name,
        help=f"engine (default {name}{why}): vaiml runs the model on the engine measured "
        "fastest for it on this machine (measured once per compiled model, cached); "
        "onnxruntime or openvino force one",
    )
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda", "tensorrt"],
        default="cpu",
        help="onnxruntime device: cuda/tensorrt keep the tensors in GPU memory and, in the "
        "image apps, upload the decoded image once and preprocess it on the GPU",
    )


def runner_options(args: argparse.Namespace, **options: Any) -> dict[str, Any]:
    """``options`` plus the ``--device`` the user chose (``cpu`` adds nothing)."""
    return {**options, "device": args.device} if args.device != "cpu" else dict(options)


def runner_type(args: argparse.Namespace) -> RunnerType:
    """The runner type ``--runner`` names."""
    return RunnerType[str(args.runner).upper()]


def engine_line(runner: Runner) -> str:
    """``engine: NAME (why)``: the line the apps print (to stderr) about the engine."""
    return f"engine: {runner.get_property('engine')} ({runner.get_property('engine_reason')})"


def image_parser(prog: str, description: str, model_help: str) -> argparse.ArgumentParser:
    """A parser with the image apps' arguments: ``-i/--image``, ``-m/--model-dir``
    (``model_help``), ``-c/--non-zero-copy``, ``-n/--runs``, ``--labels``, ``--runner`` and
    ``--no-spin``. The app adds its own and parses with :func:`parse_image_args`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.set_defaults(prog=prog)  # the name its signal line gives
    parser.add_argument("-i", "--image", required=True,
                        help="input image (JPEG, PNG, WebP, BMP, TIFF, GIF...: any format "
                        "Pillow reads; EXIF orientation applied)")  # fmt: skip
    # -m means one thing in every app: a compiled model path or a built-in name
    # (--model-dir, its older name here, still works)
    parser.add_argument("-m", "--model-dir", metavar="MODEL", help=model_help)
    parser.add_argument(
        "-c", "--non-zero-copy", action="store_true", help="CPU tensor type (runner converts)"
    )
    parser.add_argument("-n", "--runs", type=int, default=1, help="timed iterations (default 1)")
    parser.add_argument(
        "--labels",
        metavar="FILE",
        help="class names of your own model, one per line (default: the names the model "
        "records, or the built-in model's own)",
    )
    add_runner_argument(parser)
    add_memory_argument(parser)
    parser.add_argument(
        "--no-spin",
        action="store_true",
        help="onnxruntime engine threads block between parallel sections instead of spinning "
        "(faster when other processes compete for the cores; spinning, onnxruntime's own "
        "default, is 10-25%% faster on an idle machine)",
    )
    add_output_arguments(parser)
    return parser


def parse_image_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``; a usage error (``--runs`` below 1 included) exits with status 2."""
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    return args


def builtin_name(args: argparse.Namespace, names: Sequence[str]) -> None:
    """``-m NAME`` where NAME is a built-in model (and no such path exists) means
    ``--model NAME``, as in copyless-video and copyless-batch; a detector's zoo name
    (``copyless-zoo --list``) and its task name are one (see ``_models.builtin_alias``)."""
    alias = builtin_alias(args.model_dir, names)
    if alias is not None:
        args.model, args.model_dir = alias, None


def tensor_type(args: argparse.Namespace) -> TensorType:
    """HW (zero-copy), or CPU with ``-c`` (the runner converts inside ``execute``)."""
    return TensorType.CPU if args.non_zero_copy else TensorType.HW


def run_image_app(args: argparse.Namespace, builtin: Callable[[], Path], app: ImageApp) -> int:
    """Check the image and model paths, decode the image, open a runner on ``--model-dir``
    (else ``builtin()``, compiled on first use) with both tensor types set to
    :func:`tensor_type`, and return what ``app`` returns. A missing file, an undecodable
    image or a model the runner refuses is printed and gives :data:`EXIT_USAGE`.

    SIGINT / SIGTERM: ``args.interruption`` (an :class:`Interruption`) tells
    :func:`timed_runs` to end after the round running; the app reports what it has and
    the exit status becomes 130 / 143 with one ``stopped by`` line."""
    code = EXIT_USAGE  # what a second signal (stop now) leaves: exit_code makes it 130/143
    with Interruption(getattr(args, "prog", "")) as interrupted:
        args.interruption = interrupted
        code = _run_image_app(args, builtin, app)
    return interrupted.exit_code(code)


def _run_image_app(args: argparse.Namespace, builtin: Callable[[], Path], app: ImageApp) -> int:
    if not Path(args.image).is_file():
        print(f"error: no image at {args.image}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.model_dir is not None:
            check_model_path(args.model_dir)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    view = tensor_type(args).name
    # One synchronous stream, as the VART-ML samples on a dedicated device: the engine's
    # threads spin within each run (onnxruntime's default) unless --no-spin.
    options = runner_options(args, input_tensor_type=view, output_tensor_type=view,
                             engine_spinning=not args.no_spin)  # fmt: skip
    try:
        budget = MemoryBudget.of(getattr(args, "max_memory", None))
        limit = ReadLimit(budget.limit - APP_BASE, f"{budget.source} leaves for the image")
        image = decode(Path(args.image), limit=limit)
        model = Path(args.model_dir) if args.model_dir else builtin()
        with RunnerFactory.create_runner(model, options, runner_type(args)) as runner:
            print(engine_line(runner), file=sys.stderr)
            say_precision(runner)
            return app(runner, image, args)
    except (CopylessError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def say_precision(model: Runner | CompiledModel) -> None:
    """Print (stderr) what a reduced-precision model costs, as its compiler measured it
    (``int8 model: top-1 as fp32 on ...``); nothing for an fp32 model."""
    note = precision_line((model.model if isinstance(model, Runner) else model).metadata)
    if note is not None:
        print(note, file=sys.stderr)


def timed_runs(
    runner: Runner,
    x: NpuTensor,
    y: NpuTensor | Sequence[NpuTensor],
    runs: int,
    preprocess: Callable[[], _Prepared],
    postprocess: Callable[[_Prepared], _Result],
    interruption: Interruption | None = None,
) -> tuple[_Result, StageClock] | None:
    """``preprocess()`` (writes ``x``), ``execute`` of ``x`` -> ``y`` (one output tensor, or
    one per model output), ``postprocess`` of
    what preprocess returned (reads ``y``): one untimed warm-up, then ``runs`` timed rounds
    (fewer once ``interruption`` caught a signal: the rounds done are kept).

    Returns the last postprocess result and the seconds of each stage of :data:`STAGES`
    per timed round, or None (after printing the status) when ``execute`` does not
    succeed."""
    clock = StageClock(STAGES)
    outputs = [y] if isinstance(y, NpuTensor) else list(y)
    warm_up = _round(runner, x, outputs, preprocess, postprocess)
    if warm_up is None:
        return None
    result = warm_up[0]
    for _ in range(runs):
        if interruption is not None and interruption.interrupted:
            break
        timed = _round(runner, x, outputs, preprocess, postprocess)
        if timed is None:
            return None
        result, seconds = timed
        clock.add_all(dict(zip(STAGES, seconds, strict=True)))
    return result, clock


def benchmark_block(clock: StageClock) -> list[str]:
    """The VART-ML samples' lines: per-stage ms / frame (means over the timed rounds),
    total, and the two FPS figures (``throughput (pipeline)``: one frame's whole round)."""
    stages = clock.snapshot()
    pre, inf, post = (stages[stage].mean * 1000.0 for stage in STAGES)
    total = pre + inf + post
    return [
        f"{'preprocess':<24}{pre:.3f} ms / frame",
        f"{'infer':<24}{inf:.3f} ms / frame",
        f"{'postprocess':<24}{post:.3f} ms / frame",
        f"{'total':<24}{total:.3f} ms / frame",
        f"{'throughput (infer)':<24}{1000.0 / inf if inf else 0.0:.3f} FPS",
        f"{'throughput (pipeline)':<24}{1000.0 / total if total else 0.0:.3f} FPS",
    ]


def benchmark_timings(clock: StageClock) -> dict[str, float]:
    """:func:`benchmark_block`'s figures for a JSON summary: ms / frame per stage and total,
    the two FPS figures, and the timed rounds."""
    stages = clock.snapshot()
    pre, inf, post = (stages[stage].mean * 1000.0 for stage in STAGES)
    total = pre + inf + post
    return {
        "preprocess_ms": round(pre, 4),
        "infer_ms": round(inf, 4),
        "postprocess_ms": round(post, 4),
        "total_ms": round(total, 4),
        "throughput_infer_fps": round(1000.0 / inf, 3) if inf else 0.0,
        "throughput_pipeline_fps": round(1000.0 / total, 3) if total else 0.0,
        "rounds": stages[STAGES[0]].count,
    }


def report_timing(out: Output, clock: StageClock) -> None:
    """The benchmark block, as lines or as the JSON summary's timings (none with --quiet)."""
    out.timing(benchmark_block(clock), benchmark_timings(clock))


def _round(
    runner: Runner,
    x: NpuTensor,
    outputs: list[NpuTensor],
    preprocess: Callable[[], _Prepared],
    postprocess: Callable[[_Prepared], _Result],
) -> tuple[_Result, tuple[float, float, float]] | None:
    t0 = time.perf_counter()
    prepared = preprocess()
    t1 = time.perf_counter()
    with held():  # a signal inside the engine's run on this (main) thread: see held()
        status = runner.execute([[x]], [outputs])
    t2 = time.perf_counter()
    if status is not StatusCode.SUCCESS:
        print(f"error: execute returned {status.name}", file=sys.stderr)
        return None
    result = postprocess(prepared)
    return result, (t1 - t0, t2 - t1, time.perf_counter() - t2)
