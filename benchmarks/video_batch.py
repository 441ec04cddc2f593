"""Batch size for copyless-video, ms per frame: EfficientNet-Lite0 compiled for a clip's
I420 planes (the built-in model ``copyless-video`` runs) at batch 1, 2, 4, 8, each run the
way the app runs it (2 async slots, the engines sized for them), in one process, interleaved.

What this decides: the default ``--batch`` (``copyless.apps.video._cli.DEFAULT_BATCH``). Each
round runs every batch size on 32 frames' worth of jobs (alternating the order); the figure
is the median over rounds of ms per frame, and the ratio is batch 1's median / batch B's
(> 1: batching pays). The planes are blank (the cost of a run does not depend on them).

Run: ``python benchmarks/video_batch.py [--size 480x640] [--rounds 6] [--batches 1,2,4,8]
[--runner openvino]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from copyless.apps.builtins import stream_model
from copyless.runner import RunnerFactory, RunnerOptions
from copyless.types import JobHandle, RunnerType, TensorDirection, TensorType
from copyless.vision import VideoSource

SLOTS = 2


def _jobs(runner: Any, batch: int, frames: int, tensors: Any) -> float:
    """Seconds per frame of ``frames // batch`` jobs through ``SLOTS`` slots."""
    inputs, outputs = tensors
    count = max(2, frames // batch)
    pending: list[JobHandle | None] = [None] * SLOTS
    start = time.perf_counter()
    for k in range(count):
        slot = k % SLOTS
        if pending[slot] is not None:
            runner.wait(pending[slot], -1)
        pending[slot] = runner.execute_async([inputs[slot]], [outputs[slot]])
    for handle in pending:
        if handle is not None:
            runner.wait(handle, -1)
    return (time.perf_counter() - start) / (count * batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="480x640", help="HxW of the clip")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--runner", default="onnxruntime", choices=["onnxruntime", "openvino"])
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from video_helpers import make_clip

    batches = [int(b) for b in args.batches.split(",")]
    height, width = (int(v) for v in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        clip = make_clip(Path(tmp) / "clip.mp4", height, width, 2)
        with VideoSource(clip) as source:
            info, lines = source.info, source.line_sizes()
    kind = RunnerType.OPENVINO if args.runner == "openvino" else RunnerType.ONNXRUNTIME
    options: dict[str, Any] = {"max_concurrent_runs": SLOTS}
    if kind is RunnerType.ONNXRUNTIME:  # as copyless-video sizes them
        options["num_threads"] = RunnerOptions(max_concurrent_runs=SLOTS).async_engine_threads()
    runners, tensors = {}, {}
    for batch in batches:
        runner = RunnerFactory.create_runner(stream_model("efficientnet-lite0", info, lines, batch),
                                             options, kind)  # fmt: skip
        ins = runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW)
        outs = runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW)
        tensors[batch] = (
            [[runner.allocate_npu_tensor(i) for i in ins] for _ in range(SLOTS)],
            [[runner.allocate_npu_tensor(o) for o in outs] for _ in range(SLOTS)],
        )
        runners[batch] = runner
        _jobs(runner, batch, 2 * batch, tensors[batch])  # warm
    print(f"clip {width}x{height}, --runner {args.runner}, {SLOTS} slots; "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    times: dict[int, list[float]] = {b: [] for b in batches}
    for r in range(args.rounds):
        for batch in batches if r % 2 == 0 else batches[::-1]:
            times[batch].append(_jobs(runners[batch], batch, 32, tensors[batch]))
    base = statistics.median(times[batches[0]])
    for batch in batches:
        ms = statistics.median(times[batch])
        print(f"batch {batch}: {ms * 1000:.2f} ms / frame, {base / ms:.2f}x batch {batches[0]}")
    for runner in runners.values():
        runner.close()
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
