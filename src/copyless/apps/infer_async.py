"""copyless-infer-async: pipelined async inference, after VART-ML's vart_infer_async sample.

One IFM batch (``--input-binary``: raw bytes in the model's HW input layout, or ``--dry-run``:
random) is copied once into every job slot's runner-allocated input tensors; then
``--num-iteration`` jobs run through three phases: prime (fill all slots), steady state (wait
for the oldest job, resubmit on its slot), drain (wait for the rest). ``--benchmark`` adds a
synchronous ``execute`` pass on the same data. Without --dry-run/--benchmark the outputs of the
last completed job are written as ``output_f<frame>_<tensor>.bin``.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np

from ..memory import NpuTensor
from ..runner import Runner, RunnerFactory
from ..types import CopylessError, JobHandle, StatusCode, TensorDirection, TensorType
from ..vision.gpu import download, upload
from ._setup import add_runner_argument, runner_options, runner_type

#: Jobs kept in flight, as kNumConcurrentJobs in the C++ sample.
NUM_CONCURRENT_JOBS = 2
EXIT_USAGE = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="copyless-infer-async", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model-path", required=True, help="compiled model (.rai or directory)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input-binary", help="raw IFM bytes in the model's HW input layout")
    source.add_argument("--dry-run", action="store_true", help="random IFM; no file I/O")
    parser.add_argument(
        "-n", "--num-iteration", type=int, default=1, help="submissions (default 1)"
    )
    parser.add_argument("--benchmark", action="store_true", help="also time a sync pass")
    add_runner_argument(parser)
    args = parser.parse_args(argv)
    if args.num_iteration < 1:
        parser.error("--num-iteration must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not Path(args.model_path).exists():
        print(f"error: no model at {args.model_path}", file=sys.stderr)
        return EXIT_USAGE
    try:
        options = runner_options(args, max_concurrent_runs=NUM_CONCURRENT_JOBS)
        with RunnerFactory.create_runner(args.model_path, options, runner_type(args)) as runner:
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
    slots = []
    for _ in range(NUM_CONCURRENT_JOBS):
        inputs = [runner.allocate_npu_tensor(info) for info in in_infos]
        offset = 0
        for tensor in inputs:
            size = tensor.info.size_in_bytes
            upload(tensor, ifm[offset : offset + size])
            offset += size
        slots.append((inputs, [runner.allocate_npu_tensor(info) for info in out_infos]))
    start = time.perf_counter()
    completed, last = _pipeline(runner, slots, args.num_iteration)
    async_ms = (time.perf_counter() - start) * 1000.0
    print(f"Batches completed: {completed} / {args.num_iteration}")
    frames = args.num_iteration * runner.get_batch_size()
    if args.benchmark:
        inputs, outputs = slots[0]
        start = time.perf_counter()
        for _ in range(args.num_iteration):
            runner.execute([inputs], [outputs])
        sync_ms = (time.perf_counter() - start) * 1000.0
        print(f"[INFO] async infer pass: {async_ms:.3f} ms ({async_ms / frames:.3f} ms/frame)")
        print(f"[INFO] sync infer pass: {sync_ms:.3f} ms ({sync_ms / frames:.3f} ms/frame)")
    elif not args.dry_run and last is not None:
        for index, tensor in enumerate(slots[last][1]):
            Path(f"output_f0_{index}.bin").write_bytes(download(tensor).tobytes())
    return 0 if completed == args.num_iteration else 1


def _pipeline(
    runner: Runner, slots: list[tuple[list[NpuTensor], list[NpuTensor]]], total: int
) -> tuple[int, int | None]:
    """Prime, steady state, drain. Returns (completed jobs, slot of the last completed)."""
    in_flight: collections.deque[tuple[int, JobHandle]] = collections.deque()
    submitted = completed = 0
    last: int | None = None
    while submitted < total or in_flight:
        free = len(in_flight) < len(slots) and submitted < total
        if free:  # prime, then resubmit on the slot the oldest job freed
            slot = submitted % len(slots)
            inputs, outputs = slots[slot]
            handle = runner.execute_async([inputs], [outputs])
            if handle.status is StatusCode.SUCCESS:
                in_flight.append((slot, handle))
                submitted += 1
                continue
            if handle.status is not StatusCode.RESOURCE_UNAVAILABLE:
                print(f"error: execute_async returned {handle.status.name}", file=sys.stderr)
                submitted += 1
                continue
        slot, oldest = in_flight.popleft()
        status = runner.wait(oldest, -1)
        if status is StatusCode.SUCCESS:
            completed += 1
            last = slot
        else:
            print(f"error: job failed with {status.name}", file=sys.stderr)
    return completed, last


def _load_ifm(args: argparse.Namespace, expected: int) -> np.ndarray | None:
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
