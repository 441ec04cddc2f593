"""copyless-infer-async: pipelined async inference, after VART-ML's vart_infer_async sample.

One IFM batch (``--input-binary``: raw bytes in the model's HW input layout, or ``--dry-run``:
random, and then any ``--input-binary`` is not read, as in the sample) is copied once into
every job slot's runner-allocated input tensors; then ``--num-iteration`` jobs run through
three phases: prime (fill all slots), steady state (wait for the oldest job, resubmit on its
slot), drain (wait for the rest). Without --dry-run/--benchmark the outputs of the last
completed job are written as ``output_f<frame>_<tensor>.bin``, one file per frame of its
batch (frame = submission index x batch size + position in the batch).

``--benchmark`` adds a synchronous ``execute`` pass on the same data. Both passes are timed
after a warm-up that neither counts (``Runner.warm_up`` and one untimed round of each, as
the sample's prime phase runs before its steady state), in ``--rounds`` alternating rounds
(on a shared machine, load that drifts weighs on both passes alike). ``--host-work-ms MS``
adds MS of host CPU work per frame after each job completes (numpy passes that release the
GIL, as decoding and pre/postprocessing do): the async pass overlaps it with the next job,
the sync pass cannot.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..runner import Runner, RunnerFactory, batch_axis
from ..types import (
    CopylessError,
    JobHandle,
    RunnerType,
    StatusCode,
    TensorDirection,
    TensorType,
)
from ..vision import download, upload
from ._checks import UsageError, check_model_path
from ._setup import add_runner_argument, engine_line, runner_options, runner_type, say_precision

#: Jobs kept in flight, as kNumConcurrentJobs in the C++ sample.
NUM_CONCURRENT_JOBS = 2
EXIT_USAGE = 2

Slots = list[tuple[list[NpuTensor], list[NpuTensor]]]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="copyless-infer-async", description=__doc__.split("\n")[0]
    )
    parser.add_argument("-m", "--model-path", required=True,
                        help="compiled model (.rai or directory)")  # fmt: skip
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
    try:
        check_model_path(args.model_path)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.dry_run and args.input_binary is not None:
        print(f"note: --dry-run: {args.input_binary} is not read", file=sys.stderr)
    try:
        options = runner_options(args, max_concurrent_runs=NUM_CONCURRENT_JOBS, warm_up=True)
        if runner_type(args) is not RunnerType.OPENVINO and args.device == "cpu":
            # async jobs share the sync engine's threads (one session using every core)
            # instead of sessions of cores // jobs threads each. Lite0 on 2 idle cores, async
            # pass / sync pass without and with --host-work-ms 5: batch 1 1.05-1.07x /
            # 1.25-1.27x (own sessions: 1.04-1.19x / 1.05-1.11x); batch 8 1.02x (0.87x)
            options["async_engines"] = "shared"
        with RunnerFactory.create_runner(args.model_path, options, runner_type(args)) as runner:
            print(engine_line(runner), file=sys.stderr)
            say_precision(runner)
            return _run(runner, args)
    except CopylessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _run(runner: Runner, args: argparse.Namespace) -> int:
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
    slots: Slots = []
    for _ in range(NUM_CONCURRENT_JOBS):
        inputs = [runner.allocate_npu_tensor(info) for info in in_infos]
        offset = 0
        for tensor in inputs:
            size = tensor.info.size_in_bytes
            upload(tensor, ifm[offset : offset + size])
            offset += size
        slots.append((inputs, [runner.allocate_npu_tensor(info) for info in out_infos]))
    batch = runner.get_batch_size()
    work = host_work(args.host_work_ms * batch)
    if args.benchmark:
        completed, async_ms, sync_ms = _benchmark(runner, slots, args, work)
        print(f"Batches completed: {completed} / {args.num_iteration}")
        frames = args.num_iteration * batch
        print(f"[INFO] async infer pass: {async_ms:.3f} ms ({async_ms / frames:.3f} ms/frame)")
        print(f"[INFO] sync infer pass: {sync_ms:.3f} ms ({sync_ms / frames:.3f} ms/frame)")
        return 0 if completed == args.num_iteration else 1
    completed, last = _pipeline(runner, slots, args.num_iteration, work)
    print(f"Batches completed: {completed} / {args.num_iteration}")
    if not args.dry_run and last is not None:
        slot, index = last
        _write_outputs(slots[slot][1], index, batch)
    return 0 if completed == args.num_iteration else 1


def _benchmark(
    runner: Runner, slots: Slots, args: argparse.Namespace, work: Callable[[], None]
) -> tuple[int, float, float]:
    """(async jobs completed, async ms, sync ms) over ``--num-iteration`` submissions each.

    Warm-up first, untimed (bindings and plans of every slot, as the sample's prime phase
    before its steady state). Then the passes alternate in ``--rounds`` rounds (async
    first in even rounds, sync first in odd ones) so that a machine whose load drifts
    weighs on both alike; each pass's time is the sum of its rounds.
    """
    _pipeline(runner, slots, len(slots), work)
    runner.execute(*_frame(slots[0]))
    rounds = max(1, min(args.rounds, args.num_iteration))
    completed, async_s, sync_s = 0, 0.0, 0.0
    for index in range(rounds):
        count = args.num_iteration // rounds + (index < args.num_iteration % rounds)
        for mode in ("async", "sync") if index % 2 == 0 else ("sync", "async"):
            start = time.perf_counter()
            if mode == "async":
                completed += _pipeline(runner, slots, count, work)[0]
                async_s += time.perf_counter() - start
            else:
                for _ in range(count):
                    runner.execute(*_frame(slots[0]))
                    work()
                sync_s += time.perf_counter() - start
    return completed, async_s * 1000.0, sync_s * 1000.0


def _frame(
    slot: tuple[list[NpuTensor], list[NpuTensor]],
) -> tuple[list[list[NpuTensor]], list[list[NpuTensor]]]:
    inputs, outputs = slot
    return [inputs], [outputs]


def _pipeline(
    runner: Runner, slots: Slots, total: int, work: Callable[[], None]
) -> tuple[int, tuple[int, int] | None]:
    """Prime, steady state, drain. Returns (completed jobs, (slot, submission index) of the
    last completed job)."""
    in_flight: collections.deque[tuple[int, int, JobHandle]] = collections.deque()
    submitted = completed = 0
    last: tuple[int, int] | None = None
    while submitted < total or in_flight:
        if len(in_flight) < len(slots) and submitted < total:
            # prime, then resubmit on the slot the oldest job freed
            slot = submitted % len(slots)
            handle = runner.execute_async(*_frame(slots[slot]))
            if handle.status is StatusCode.SUCCESS:
                in_flight.append((slot, submitted, handle))
                submitted += 1
                continue
            if handle.status is not StatusCode.RESOURCE_UNAVAILABLE:
                print(f"error: execute_async returned {handle.status.name}", file=sys.stderr)
                submitted += 1
                continue
        slot, index, oldest = in_flight.popleft()
        status = runner.wait(oldest, -1)
        if status is StatusCode.SUCCESS:
            completed += 1
            last = (slot, index)
            work()  # this job's host work overlaps the job still in flight
        else:
            print(f"error: job failed with {status.name}", file=sys.stderr)
    return completed, last


def _write_outputs(outputs: list[NpuTensor], index: int, batch: int) -> None:
    """``output_f<frame>_<tensor>.bin`` for each frame of submission ``index``'s batch. A
    data-dependent output writes what the job produced (``produced_shape``, C-contiguous at
    the start of its capacity), not the whole capacity."""
    for number, tensor in enumerate(outputs):
        data = download(tensor)  # a view of host memory; a copy of device memory
        produced = tensor.produced_shape
        if produced is not None:
            count = int(np.prod(produced))
            data = data.reshape(-1)[:count].reshape(produced)
            Path(f"output_f{index * batch}_{number}.bin").write_bytes(data.tobytes())
            continue
        axis = batch_axis(tensor.info)
        for b in range(batch):
            frame = np.take(data, b, axis=axis) if batch > 1 else data
            Path(f"output_f{index * batch + b}_{number}.bin").write_bytes(frame.tobytes())


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
