"""copyless-infer-async: pipelined async inference, after VART-ML's vart_infer_async sample.

One IFM batch (``--input-binary``: raw bytes in the model's HW input layout, or ``--dry-run``:
random, and then any ``--input-binary`` is not read, as in the sample) is copied once into
every job slot's input tensors; then ``--num-iteration`` jobs run through the sample's three
phases, prime (fill the slots), steady state (a slot resubmitted as its job ends) and drain,
which :class:`copyless.Pipeline` owns (``max_concurrent_runs`` 2, as kNumConcurrentJobs,
and the Pipeline's default of one more slot prepared meanwhile). Without
--dry-run/--benchmark the outputs of the last job are written as
``output_f<frame>_<tensor>.bin``, one file per frame of its batch (frame = submission index
x batch size + position in the batch).

``--benchmark`` adds a synchronous ``execute`` pass on the same data. Both passes are timed
after a warm-up that neither counts (``Runner.warm_up`` and one untimed round of each, as
the sample's prime phase runs before its steady state), in ``--rounds`` alternating rounds
(on a shared machine, load that drifts weighs on both passes alike). ``--host-work-ms MS``
adds MS of host CPU work per frame after each job completes (numpy passes that release the
GIL, as decoding and pre/postprocessing do): the async pass overlaps it with the next job,
the sync pass cannot. SIGINT/SIGTERM stop submitting; the jobs in flight end, the counts
are printed, and the exit status is 130/143.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..pipeline import ItemTensors, Pipeline
from ..runner import Runner, RunnerFactory
from ..types import (
    CopylessError,
    OptionError,
    RunnerType,
    TensorDirection,
    TensorType,
    round_medians,
)
from ..vision import download, upload
from ._checks import UsageError, check_model_path
from ._models import CLASSIFIER, DETECTOR, builtin_alias, builtin_model
from ._output import Output, add_output_arguments
from ._setup import add_runner_argument, engine_line, runner_options, runner_type, say_precision
from ._signals import Interruption

#: The zoo models (copyless-zoo --list) ``-m`` may name instead of a compiled model.
MODELS = (CLASSIFIER, "resnet50", DETECTOR)
#: Jobs kept in flight, as kNumConcurrentJobs in the C++ sample.
NUM_CONCURRENT_JOBS = 2
EXIT_USAGE = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="copyless-infer-async", description=__doc__.split("\n")[0]
    )
    parser.add_argument("-m", "--model-path", required=True,
                        help="compiled model (.rai or directory) or a built-in name "
                        f"({', '.join(MODELS)}: the zoo model compiled with an RGBx input, "
                        "cached)")  # fmt: skip
    parser.add_argument("--input-binary", help="raw IFM bytes in the model's HW input layout")
    parser.add_argument(
        "--dry-run", action="store_true", help="random IFM; no file I/O (--input-binary unread)"
    )
    parser.add_argument(
        "-n", "--num-iteration", type=int, default=1, help="submissions (default 1)"
    )
    parser.add_argument("--benchmark", action="store_true", help="also time a sync pass")
    parser.add_argument(
        "--host-work-ms", type=float, default=0.0, metavar="MS",
        help="host CPU work per frame after each job (default 0)",
    )  # fmt: skip
    parser.add_argument(
        "--rounds", type=int, default=5,
        help="--benchmark: alternate the async and sync passes in this many rounds (default 5)",
    )  # fmt: skip
    add_runner_argument(parser)
    parser.add_argument(
        "-o", "--option", action="append", default=[], metavar="KEY=VALUE",
        help="a runner option (README's table), e.g. native_async=true, num_threads=1; "
        "repeat for more",
    )  # fmt: skip
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    if not args.dry_run and args.input_binary is None:
        parser.error("one of --input-binary or --dry-run is required")
    if args.num_iteration < 1:
        parser.error("--num-iteration must be >= 1")
    if not 0.0 <= args.host_work_ms <= 10_000.0:
        parser.error("--host-work-ms must be in [0, 10000]")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Output.from_args(args)
    try:
        builtin = builtin_alias(args.model_path, MODELS)
        if builtin is not None:
            args.model_path = str(builtin_model(builtin))
        check_model_path(args.model_path)
    except (UsageError, CopylessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.dry_run and args.input_binary is not None:
        print(f"note: --dry-run: {args.input_binary} is not read", file=sys.stderr)
    try:
        options = runner_options(args, max_concurrent_runs=NUM_CONCURRENT_JOBS, warm_up=True)
        options.update(_options(args.option))
        if runner_type(args) is not RunnerType.OPENVINO and args.device == "cpu":
            # async jobs share the sync engine's threads (one session using every core)
            # instead of sessions of cores // jobs threads each. Lite0 on 2 idle cores, async
            # pass / sync pass without and with --host-work-ms 5: batch 1 1.05-1.07x /
            # 1.25-1.27x (own sessions: 1.04-1.19x / 1.05-1.11x); batch 8 1.02x (0.87x)
            options["async_engines"] = "shared"
        with Interruption("copyless-infer-async") as interrupted, \
                RunnerFactory.create_runner(args.model_path, options, runner_type(args)) as runner:
            print(engine_line(runner), file=sys.stderr)
            say_precision(runner)
            code = _run(runner, args, interrupted, out)
        return interrupted.exit_code(code)
    except CopylessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _run(
    runner: Runner, args: argparse.Namespace, interrupted: Interruption, out: Output
) -> int:
    in_infos = runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW)
    out_infos = runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW)
    ifm = _load_ifm(args, sum(i.size_in_bytes for i in in_infos))
    if ifm is None:
        return EXIT_USAGE
    unbounded = [info.name for info in out_infos if not info.bounded]
    if unbounded:  # a data-dependent output with no known bound: no buffer size to allocate
        print(
            f"error: output(s) {', '.join(unbounded)} have no capacity (-1 dims): compile the "
            "model with copyless-compile --output-capacity NAME=D0xD1...",
            file=sys.stderr,
        )
        return EXIT_USAGE
    batch = runner.get_batch_size()
    jobs = _Jobs(runner, ifm, batch, host_work(args.host_work_ms), write=not args.dry_run)
    if not args.benchmark:  # a line per job of the run (--benchmark's passes: its summary)
        jobs.out = out
    with Pipeline(runner, jobs.prepare, jobs.finish, batch=batch) as pipeline:
        interrupted.on_signal(pipeline.stop)
        if args.benchmark:
            async_ms, sync_ms = _benchmark(runner, pipeline, jobs, args)
            out.say(f"Batches completed: {jobs.completed} / {args.num_iteration}")
            frames = args.num_iteration * batch
            out.timing(
                [f"[INFO] async infer pass: {async_ms:.3f} ms ({async_ms / frames:.3f} ms/frame)",
                 f"[INFO] sync infer pass: {sync_ms:.3f} ms ({sync_ms / frames:.3f} ms/frame)"],
                {"async_ms": round(async_ms, 3), "async_ms_per_frame": round(async_ms / frames, 4),
                 "sync_ms": round(sync_ms, 3), "sync_ms_per_frame": round(sync_ms / frames, 4)},
            )  # fmt: skip
        else:
            jobs.last = args.num_iteration - 1
            jobs.run(pipeline, args.num_iteration)
            out.say(f"Batches completed: {jobs.completed} / {args.num_iteration}")
    out.summary(model=args.model_path, engine=str(runner.get_property("engine")),
                completed=jobs.completed, submitted=args.num_iteration, batch=batch,
                outputs=jobs.written)  # fmt: skip
    return 0 if jobs.completed == args.num_iteration else 1


class _Jobs:
    """The sample's submissions on a :class:`copyless.Pipeline` of ``batch``-frame jobs.

    Each job slot's input rows are filled with the IFM once, the first time the slot comes
    round (the sample copies the IFM into every slot before its prime phase); then jobs run
    on what is there. After each job, ``work`` per frame (the host work the async pass
    overlaps with the next job); the last submission's outputs are written (``write``)."""

    def __init__(self, runner: Runner, ifm: npt.NDArray[np.uint8], batch: int,
                 work: Callable[[], None], write: bool) -> None:  # fmt: skip
        self.runner, self.ifm, self.batch, self.work, self.write = runner, ifm, batch, work, write
        self.filled: set[int] = set()
        self.completed = 0
        self.last = -1  # the submission whose outputs are written
        self.out = Output()
        self.written: list[str] = []

    def prepare(self, frame: int, inputs: ItemTensors) -> None:
        if id(inputs) in self.filled:
            return
        offset = 0
        for tensor in inputs:  # frame ``row`` of each input, in the model's order
            size = tensor.info.size_in_bytes
            start = offset + inputs.row * size
            upload(tensor, self.ifm[start : start + size])
            offset += size * self.batch
        self.filled.add(id(inputs))

    def finish(self, frame: int, outputs: ItemTensors) -> None:
        submission, row = divmod(frame, self.batch)
        if row == 0:
            self.completed += 1
        if self.write and submission == self.last:
            self.written.extend(_write_outputs(outputs, frame, row))
        self.work()

    def run(self, pipeline: Pipeline, submissions: int) -> None:
        """Prime, steady state and drain: the Pipeline's own loop."""
        failed = None
        for result in pipeline.map(range(submissions * self.batch)):
            job, row = divmod(result.index, self.batch)
            if result.error is not None and job != failed:
                failed = job
                print(f"error: job {failed} failed: {result.error}", file=sys.stderr)
            if row == self.batch - 1:  # in submission order (finish runs as jobs complete)
                error = None if job != failed else str(result.error)
                self.out.record("job", job=job, frames=self.batch, error=error)


def _benchmark(
    runner: Runner, pipeline: Pipeline, jobs: _Jobs, args: argparse.Namespace
) -> tuple[float, float]:
    """(async ms, sync ms) over ``--num-iteration`` submissions each.

    Warm-up first, untimed (bindings and plans of every slot, as the sample's prime phase
    before its steady state). Then the passes alternate in ``--rounds`` rounds
    (:func:`copyless.types.round_medians`: async first in the first round, then sync
    first, and so on) so that a machine whose load drifts weighs on both alike; each pass's time is
    the sum of its rounds. The sync pass runs
    ``execute`` on tensors of its own holding the same IFM.
    """
    inputs, outputs = _sync_tensors(runner, jobs.ifm)
    jobs.run(pipeline, pipeline.slots)
    runner.execute(inputs, outputs)
    jobs.completed = 0
    rounds = max(1, min(args.rounds, args.num_iteration))
    counts = [args.num_iteration // rounds + (i < args.num_iteration % rounds)
              for i in range(rounds)]  # fmt: skip
    done = {"async": 0, "sync": 0}  # rounds each pass has run
    per_frame = jobs.work

    def async_pass() -> None:
        jobs.run(pipeline, counts[done["async"]])
        done["async"] += 1

    def sync_pass() -> None:
        for _ in range(counts[done["sync"]]):
            runner.execute(inputs, outputs)
            for _ in range(jobs.batch):
                per_frame()
        done["sync"] += 1

    # one call of each pass a round, the first alternating (copyless's one way of timing
    # alternatives); a pass's time is the sum of its rounds, as the sample reports a pass
    found = round_medians({"async": async_pass, "sync": sync_pass}, 1, lambda n: n < rounds)
    return sum(found["async"]) * 1000.0, sum(found["sync"]) * 1000.0


def _sync_tensors(
    runner: Runner, ifm: npt.NDArray[np.uint8]
) -> tuple[list[list[NpuTensor]], list[list[NpuTensor]]]:
    """Whole-batch tensors for the sync pass, the IFM uploaded once."""
    inputs = [runner.allocate_npu_tensor(i)
              for i in runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW)]  # fmt: skip
    offset = 0
    for tensor in inputs:
        size = tensor.info.size_in_bytes
        upload(tensor, ifm[offset : offset + size])
        offset += size
    outputs = [runner.allocate_npu_tensor(o)
               for o in runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW)]  # fmt: skip
    return [inputs], [outputs]


def _write_outputs(outputs: Sequence[NpuTensor], frame: int, row: int) -> list[str]:
    """``output_f<frame>_<tensor>.bin`` for one frame of the last submission. A
    data-dependent output (one tensor for the whole job) is written once, by the job's first
    frame, as what the job produced (``produced_shape``, C-contiguous at the start of its
    capacity), not the whole capacity. Returns the names written."""
    written = []
    for number, tensor in enumerate(outputs):
        data = download(tensor)  # a view of host memory; a copy of device memory
        produced = tensor.produced_shape
        if produced is not None:
            if row != 0:
                continue
            count = int(np.prod(produced))
            data = data.reshape(-1)[:count].reshape(produced)
        name = f"output_f{frame}_{number}.bin"
        Path(name).write_bytes(data.tobytes())
        written.append(name)
    return written


def host_work(ms: float) -> Callable[[], None]:
    """A function that keeps one core busy for about ``ms`` milliseconds in numpy passes
    over 1 MiB (which release the GIL, as image decoding and resizing do)."""
    if ms <= 0:
        return lambda: None
    a = np.linspace(0.0, 1.0, 1 << 18, dtype=np.float32)
    out = np.empty_like(a)

    def one_pass() -> None:
        np.multiply(a, 1.0001, out=out)
        np.sqrt(out, out=out)

    start = time.perf_counter()
    for _ in range(20):
        one_pass()
    per_pass = max((time.perf_counter() - start) / 20, 1e-7)
    passes = max(1, round(ms / 1000.0 / per_pass))

    def work() -> None:
        for _ in range(passes):
            one_pass()

    return work


def _options(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` runner options; values read as JSON where they parse (true, 1, "x"),
    else as strings. The runner validates them (OptionError: exit 2)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise OptionError(f"--option {pair!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options


def _load_ifm(args: argparse.Namespace, expected: int) -> npt.NDArray[np.uint8] | None:
    if args.dry_run:
        return np.random.default_rng(0).integers(0, 256, expected, dtype=np.uint8)
    path = Path(args.input_binary)
    if not path.is_file():
        print(f"error: no input binary at {path}", file=sys.stderr)
        return None
    data = np.fromfile(path, dtype=np.uint8)
    if data.nbytes != expected:
        print(
            f"error: {path} holds {data.nbytes} bytes but the model's HW input needs "
            f"{expected} bytes",
            file=sys.stderr,
        )
        return None
    return data
