"""Frames across processes: fd-shared slots (copyless.ipc) vs a multiprocessing.Queue.

Both sides move the same 640x640x3 uint8 frames from the same number of producer
processes to one consumer, with the same work at each end: a producer writes a frame
(one 1.2 MB copy from a pre-made frame, standing in for a decoder), the consumer reads a
sparse sample of it. The fd-shared producer writes straight into a slot the consumer
mapped once; the queue producer writes into a fresh array that is pickled through a
pipe and unpickled on the other side. Timing starts once every producer has delivered a
frame (process start-up is not measured).

With ``--model`` it also runs EfficientNet-Lite0 behind both, compiled so that its HW
input is the decoder's frame (``input_format="rgbx", input_size=(640, 640)``: packed RGBx
uint8, resized and normalised inside the graph). Producers "decode" the same photo (one
copy of a pre-made RGBx frame) into a runner-allocated slot, or into a fresh array sent
through the queue and copied into a runner tensor by the consumer; the consumer runs
``execute_async`` with the same number of jobs in flight on both sides and checks every
result is a cat. Model and transport runs are interleaved (fd, queue, fd, queue, ...) and
the medians reported, with every run printed, and for the model the CPU per frame of all
processes (consumer with its engine threads, producers from their first frame on): on a
shared machine the queue's extra processes can take their CPU from other users, so the
wall-clock ratio alone understates what the transport costs.

Run: ``python benchmarks/ipc_pipeline.py [--frames 2000] [--repeats 5] [--model]``
The last line is ``ipc: fd-shared N frames/s, pickled queue M frames/s, ratio R.RRx``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from copyless.ipc import Producer, SlotPipeline, SlotPool
from copyless.memory import HostMemory, NpuTensor
from copyless.types import (
    DataType,
    MemoryLayout,
    MemoryType,
    NpuTensorInfo,
    StatusCode,
    TensorDirection,
    TensorType,
)

FRAME = NpuTensorInfo(
    "frame",
    DataType.UINT8,
    TensorDirection.INPUT,
    TensorType.HW,
    MemoryLayout.NHWC,
    (1, 640, 640, 3),
)
_R = TypeVar("_R")
DISTINCT = 4  # distinct frames per producer, cycled (a decoder's output, pre-made)
SPAWN = multiprocessing.get_context("spawn")


class MemfdAllocator:
    """Allocates like the runner does (XRT_BO over a memfd), for the model-free runs."""

    def allocate_npu_tensor(self, info: NpuTensorInfo) -> NpuTensor:
        memory = HostMemory.shared(info.size_in_bytes, warn_on_leak=False)
        return NpuTensor._wrap_memory(info, memory, MemoryType.XRT_BO)


def _frames(seed: int) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).integers(0, 256, (DISTINCT, 640, 640, 3), np.uint8)


def _touch(frame: np.ndarray[Any, Any]) -> int:
    return int(frame[..., ::160, ::160, 0].sum())


# -- producers (module level: spawned processes import them) ------------------------------
def produce_slots(producer: Producer, count: int) -> None:
    frames = _frames(producer.producer_id)
    for i in range(count):
        slot = producer.acquire()
        np.copyto(slot.tensors[0].numpy()[0], frames[i % DISTINCT])
        producer.submit(slot, i)


def produce_queue(queue: Any, producer_id: int, count: int) -> None:
    frames = _frames(producer_id)
    for i in range(count):
        frame = np.empty((640, 640, 3), np.uint8)
        np.copyto(frame, frames[i % DISTINCT])
        queue.put((producer_id, i, frame))
    queue.put(None)


def _photo_rgbx(size: tuple[int, int]) -> np.ndarray[Any, Any]:
    """The cat photo as a decoder delivers it: packed RGBx uint8 at the stream's H x W."""
    from PIL import Image
    from skimage import data

    photo = getattr(data, "chelsea")()  # noqa: B009 (skimage.data is untyped)
    rgb = np.asarray(Image.fromarray(photo).resize((size[1], size[0])), np.uint8)
    return np.concatenate([rgb, np.zeros((*size, 1), np.uint8)], axis=-1)


def _report_cpu(path: str, start: float) -> None:
    """CPU seconds this producer spent (all its threads) since its first frame."""
    with open(path, "w") as f:
        f.write(str(time.process_time() - start))


def produce_model_slots(
    producer: Producer, count: int, size: tuple[int, int], cpu_file: str
) -> None:
    frame = _photo_rgbx(size)
    start = 0.0
    for i in range(count):
        slot = producer.acquire()
        np.copyto(slot.tensors[0].numpy()[0], frame)  # the "decode", into the HW view
        producer.submit(slot, i)
        start = start or time.process_time()
    _report_cpu(f"{cpu_file}.{producer.producer_id}", start)


def produce_model_queue(
    queue: Any, producer_id: int, count: int, size: tuple[int, int], cpu_file: str
) -> None:
    frame = _photo_rgbx(size)
    start = 0.0
    for i in range(count):
        out = np.empty_like(frame)
        np.copyto(out, frame)  # the same "decode", into a fresh array
        queue.put((producer_id, i, out))
        start = start or time.process_time()
    queue.put(None)
    queue.close()
    queue.join_thread()  # the feeder thread has pickled and written everything
    _report_cpu(f"{cpu_file}.{producer_id}", start)


# -- timing -------------------------------------------------------------------------------
class Clock:
    """Frames per second between the moment every producer has delivered a frame and the
    last frame (process start-up and shutdown are not measured, on either side)."""

    def __init__(self, producers: int) -> None:
        self.waiting = set(range(producers))
        self.start = self.end = 0.0
        self.cpu_start = self.cpu_end = 0.0  # this process, every thread (engine included)
        self.frames = 0

    def tick(self, producer: int) -> None:
        if self.waiting:
            self.waiting.discard(producer)
            if not self.waiting:
                self.start = self.end = time.perf_counter()
                self.cpu_start = self.cpu_end = time.process_time()
        else:
            self.frames += 1
            self.end = time.perf_counter()
            self.cpu_end = time.process_time()

    def rate(self) -> float:
        if self.frames == 0 or self.end <= self.start:
            raise RuntimeError("too few frames to time: raise --frames")
        return self.frames / (self.end - self.start)


def run_fd_shared(producers: int, frames: int, slots: int) -> float:
    clock = Clock(producers)
    with SlotPool(MemfdAllocator(), [FRAME], slots, prefetch=2) as pool:
        for _ in range(producers):
            pool.start_producer(produce_slots, frames // producers)
        views = [tensors[0].numpy() for tensors in pool.slots]  # mapped once, reused
        for item in pool.filled():
            _touch(views[item.index])
            clock.tick(item.producer)
            pool.release(item.index)
        return clock.rate()


def _drain(queue: Any, producers: int) -> Iterator[tuple[int, int, np.ndarray[Any, Any]]]:
    ended = 0
    while ended < producers:
        item = queue.get()
        if item is None:
            ended += 1
        else:
            yield item


def _with_queue(
    target: Callable[..., None], producers: int, frames: int, slots: int, *extra: Any
) -> tuple[Any, list[Any]]:
    queue = SPAWN.Queue(maxsize=slots)
    procs = [
        SPAWN.Process(target=target, args=(queue, p, frames // producers, *extra), daemon=True)
        for p in range(producers)
    ]
    for proc in procs:
        proc.start()
    return queue, procs


def _join(queue: Any, procs: list[Any]) -> None:
    for proc in procs:
        proc.join()
        proc.close()
    queue.close()
    queue.join_thread()


def run_queue(producers: int, frames: int, slots: int) -> float:
    clock = Clock(producers)
    queue, procs = _with_queue(produce_queue, producers, frames, slots)
    for producer, _, frame in _drain(queue, producers):
        _touch(frame)
        clock.tick(producer)
    rate = clock.rate()
    _join(queue, procs)
    return rate


# -- the model behind both ----------------------------------------------------------------
CATS = {281, 282, 285}


def _runner(size: tuple[int, int]) -> Any:
    from copyless.model import compile_model
    from copyless.model.zoo import build
    from copyless.runner import RunnerFactory

    rai = compile_model(
        build("efficientnet-lite0", progress=False),
        f"/tmp/copyless-bench-effnet-{size[0]}x{size[1]}.rai",
        input_format="rgbx",
        input_size=size,
        mean=(127, 127, 127),
        std=(128, 128, 128),
    )
    return RunnerFactory.create_runner(rai, {"max_concurrent_runs": IN_FLIGHT})


IN_FLIGHT = 2  # jobs in flight on both sides (the runner's max_concurrent_runs)


def _infos(runner: Any) -> tuple[list[NpuTensorInfo], list[NpuTensorInfo]]:
    return (
        runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW),
        runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW),
    )


def _check(status: StatusCode, logits: NpuTensor) -> None:
    if status is not StatusCode.SUCCESS:
        raise RuntimeError(f"job failed: {status.name}")
    if int(np.argmax(logits.numpy())) not in CATS:
        raise RuntimeError("the model did not see a cat: the frame was damaged")


def _cpu_per_frame(clock: Clock, cpu_dir: str, producers: int) -> float:
    """Milliseconds of CPU per frame: the consumer over the timed window plus every
    producer from its first frame on (start-up excluded on both sides)."""
    spent = clock.cpu_end - clock.cpu_start
    for p in range(producers):
        with open(os.path.join(cpu_dir, f"cpu.{p}")) as f:
            spent += float(f.read())
    return 1e3 * spent / clock.frames


def run_model_fd_shared(
    runner: Any, producers: int, frames: int, slots: int, size: tuple[int, int]
) -> tuple[float, float]:
    clock = Clock(producers)
    inputs, outputs = _infos(runner)
    with (
        tempfile.TemporaryDirectory() as cpu_dir,
        SlotPipeline(runner, inputs, outputs, slots, max_in_flight=IN_FLIGHT, prefetch=2) as pipe,
    ):
        cpu_file = os.path.join(cpu_dir, "cpu")
        for _ in range(producers):
            pipe.start_producer(produce_model_slots, frames // producers, size, cpu_file)
        for result in pipe.results():
            _check(result.status, result.outputs[0])
            clock.tick(result.producer)
        return clock.rate(), _cpu_per_frame(clock, cpu_dir, producers)


def run_model_queue(
    runner: Any, producers: int, frames: int, slots: int, size: tuple[int, int]
) -> tuple[float, float]:
    clock = Clock(producers)
    in_infos, out_infos = _infos(runner)
    pairs = [
        (
            [runner.allocate_npu_tensor(i) for i in in_infos],
            [runner.allocate_npu_tensor(o) for o in out_infos],
        )
        for _ in range(IN_FLIGHT)
    ]
    free = deque(pairs)
    in_flight: deque[tuple[int, Any, Any]] = deque()
    cpu_dir = tempfile.mkdtemp()
    cpu_file = os.path.join(cpu_dir, "cpu")
    queue, procs = _with_queue(produce_model_queue, producers, frames, slots, size, cpu_file)

    def finish() -> None:
        producer, handle, pair = in_flight.popleft()
        _check(runner.wait(handle, 30_000), pair[1][0])
        free.append(pair)
        clock.tick(producer)

    for producer, _, frame in _drain(queue, producers):
        if not free:
            finish()
        pair = free.popleft()
        np.copyto(pair[0][0].numpy()[0], frame)  # the copy the fd-shared path avoids
        handle = runner.execute_async([pair[0]], [pair[1]])
        in_flight.append((producer, handle, pair))
    while in_flight:
        finish()
    _join(queue, procs)
    try:
        return clock.rate(), _cpu_per_frame(clock, cpu_dir, producers)
    finally:
        shutil.rmtree(cpu_dir)


def _interleaved(
    repeats: int, fd_run: Callable[[], _R], queue_run: Callable[[], _R]
) -> tuple[list[_R], list[_R]]:
    """fd, queue, fd, queue, ...: both sides see the same drift in machine load."""
    fds: list[_R] = []
    queues: list[_R] = []
    for _ in range(repeats):
        fds.append(fd_run())
        queues.append(queue_run())
    return fds, queues


def _size(text: str) -> tuple[int, int]:
    height, _, width = text.lower().partition("x")
    return int(height), int(width)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=2000, help="frames per transport run")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=4, help="slots / queue depth (both sides)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per side (median)")
    parser.add_argument("--model", action="store_true", help="also run EfficientNet-Lite0")
    parser.add_argument("--model-frames", type=int, default=200, help="frames per model run")
    parser.add_argument("--model-repeats", type=int, default=5, help="model runs per side")
    parser.add_argument("--model-size", type=_size, default=(640, 640), metavar="HxW",
                        help="frame size the model takes (resized in its graph)")  # fmt: skip
    args = parser.parse_args()
    n, frames, slots = args.producers, args.frames, args.slots

    if args.model:
        size = args.model_size
        with _runner(size) as runner:
            model_fds, model_queues = _interleaved(
                args.model_repeats,
                lambda: run_model_fd_shared(runner, n, args.model_frames, slots, size),
                lambda: run_model_queue(runner, n, args.model_frames, slots, size),
            )
        fd, q = (
            statistics.median(r for r, _ in model_fds),
            statistics.median(r for r, _ in model_queues),
        )
        fd_cpu = statistics.median(c for _, c in model_fds)
        q_cpu = statistics.median(c for _, c in model_queues)
        print(f"model runs: fd-shared {[round(r, 1) for r, _ in model_fds]}, queue "
              f"{[round(r, 1) for r, _ in model_queues]}")  # fmt: skip
        print(
            f"model CPU per frame (all processes): fd-shared {fd_cpu:.1f} ms, "
            f"pickled queue {q_cpu:.1f} ms"
        )
        print(
            f"model (EfficientNet-Lite0, {size[0]}x{size[1]} RGBx frames): fd-shared "
            f"{fd:.1f} frames/s, pickled queue {q:.1f} frames/s, ratio {fd / q:.2f}x"
        )
    fds, queues = _interleaved(
        args.repeats,
        lambda: run_fd_shared(n, frames, slots),
        lambda: run_queue(n, frames, slots),
    )
    fd, q = statistics.median(fds), statistics.median(queues)
    print(
        f"transport runs: fd-shared {[round(x) for x in fds]}, queue {[round(x) for x in queues]}"
    )
    print(f"ipc: fd-shared {fd:.0f} frames/s, pickled queue {q:.0f} frames/s, ratio {fd / q:.2f}x")


if __name__ == "__main__":
    main()
