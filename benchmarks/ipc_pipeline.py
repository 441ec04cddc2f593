"""Frames across processes: fd-shared slots (copyless.ipc) vs a multiprocessing.Queue.

Both sides move the same 640x640x3 uint8 frames from the same number of producer
processes to one consumer, with the same work at each end: a producer writes a frame
(one 1.2 MB copy from a pre-made frame, standing in for a decoder), the consumer reads a
sparse sample of it. The fd-shared producer writes straight into a slot the consumer
mapped once; the queue producer writes into a fresh array that is pickled through a
pipe and unpickled on the other side. Timing starts once every producer has delivered a
frame (process start-up is not measured).

With ``--model`` it also runs EfficientNet-Lite0 (built from the model zoo, compiled)
behind both: producers preprocess a photo into the model input (the HW view of a
runner-allocated slot, or an array sent through the queue and copied into a runner
tensor), the consumer runs ``execute_async`` with two jobs in flight.

Run: ``.venv/bin/python benchmarks/ipc_pipeline.py [--frames 3000] [--producers 2] [--model]``
The last line is ``ipc: fd-shared N frames/s, pickled queue M frames/s, ratio R.RRx``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from copyless.ipc import Pipeline, Producer, SlotPool
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


def _photo_chw(name: str) -> np.ndarray[Any, Any]:
    from PIL import Image
    from skimage import data

    image = Image.fromarray(getattr(data, name)()).resize((224, 224))
    return np.asarray(image, np.uint8)


def _preprocess(rgb: np.ndarray[Any, Any], out: np.ndarray[Any, Any]) -> None:
    np.subtract(rgb.transpose(2, 0, 1), 127.0, out=out, dtype=np.float32)
    out *= 1.0 / 128.0


def produce_model_slots(producer: Producer, count: int) -> None:
    rgb = _photo_chw("chelsea")
    for i in range(count):
        slot = producer.acquire()
        _preprocess(rgb, slot.tensors[0].numpy()[0])
        producer.submit(slot, i)


def produce_model_queue(queue: Any, producer_id: int, count: int) -> None:
    rgb = _photo_chw("chelsea")
    for i in range(count):
        chw = np.empty((3, 224, 224), np.float32)
        _preprocess(rgb, chw)
        queue.put((producer_id, i, chw))
    queue.put(None)


# -- timing -------------------------------------------------------------------------------
class Clock:
    """Frames per second between the moment every producer has delivered a frame and the
    last frame (process start-up and shutdown are not measured, on either side)."""

    def __init__(self, producers: int) -> None:
        self.waiting = set(range(producers))
        self.start = self.end = 0.0
        self.frames = 0

    def tick(self, producer: int) -> None:
        if self.waiting:
            self.waiting.discard(producer)
            if not self.waiting:
                self.start = self.end = time.perf_counter()
        else:
            self.frames += 1
            self.end = time.perf_counter()

    def rate(self) -> float:
        if self.frames == 0 or self.end <= self.start:
            raise RuntimeError("too few frames to time: raise --frames")
        return self.frames / (self.end - self.start)


def run_fd_shared(producers: int, frames: int, slots: int) -> float:
    clock = Clock(producers)
    with SlotPool(MemfdAllocator(), [FRAME], slots, prefetch=2) as pool:
        for _ in range(producers):
            pool.start_producer(produce_slots, frames // producers)
        for item in pool.filled():
            _touch(item.tensors[0].numpy())
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
    target: Callable[..., None], producers: int, frames: int, slots: int
) -> tuple[Any, list[Any]]:
    queue = SPAWN.Queue(maxsize=slots)
    procs = [
        SPAWN.Process(target=target, args=(queue, p, frames // producers), daemon=True)
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
def _runner() -> Any:
    from copyless.model.compiler import compile_model
    from copyless.model.zoo import build
    from copyless.runner import RunnerFactory

    rai = compile_model(
        build("efficientnet-lite0", progress=False), "/tmp/copyless-bench-effnet.rai"
    )
    return RunnerFactory.create_runner(rai)


def _infos(runner: Any) -> tuple[list[NpuTensorInfo], list[NpuTensorInfo]]:
    return (
        runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW),
        runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW),
    )


def run_model_fd_shared(runner: Any, producers: int, frames: int, slots: int) -> float:
    clock = Clock(producers)
    inputs, outputs = _infos(runner)
    with Pipeline(runner, inputs, outputs, slots, max_in_flight=2, prefetch=2) as pipeline:
        for _ in range(producers):
            pipeline.start_producer(produce_model_slots, frames // producers)
        for result in pipeline.results():
            if result.status is not StatusCode.SUCCESS:
                raise RuntimeError(f"job failed: {result.status.name}")
            clock.tick(result.producer)
    return clock.rate()


def run_model_queue(runner: Any, producers: int, frames: int, slots: int) -> float:
    clock = Clock(producers)
    in_infos, out_infos = _infos(runner)
    pairs = [
        (
            [runner.allocate_npu_tensor(i) for i in in_infos],
            [runner.allocate_npu_tensor(o) for o in out_infos],
        )
        for _ in range(2)  # two jobs in flight, as the fd-shared pipeline (and the runner)
    ]
    free = deque(pairs)
    in_flight: deque[tuple[int, Any, Any]] = deque()
    queue, procs = _with_queue(produce_model_queue, producers, frames, slots)

    def finish() -> None:
        producer, handle, pair = in_flight.popleft()
        status = runner.wait(handle, 30_000)
        if status is not StatusCode.SUCCESS:
            raise RuntimeError(f"job failed: {status.name}")
        free.append(pair)
        clock.tick(producer)

    for producer, _, chw in _drain(queue, producers):
        if not free:
            finish()
        pair = free.popleft()
        np.copyto(pair[0][0].numpy()[0], chw)  # the copy the fd-shared path avoids
        handle = runner.execute_async([pair[0]], [pair[1]])
        in_flight.append((producer, handle, pair))
    while in_flight:
        finish()
    _join(queue, procs)
    return clock.rate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=2000, help="frames per transport run")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=8, help="slots / queue depth")
    parser.add_argument("--repeats", type=int, default=3, help="runs per side (median)")
    parser.add_argument("--model", action="store_true", help="also run EfficientNet-Lite0")
    parser.add_argument("--model-frames", type=int, default=300)
    args = parser.parse_args()

    if args.model:
        runner = _runner()
        fd = run_model_fd_shared(runner, args.producers, args.model_frames, args.slots)
        q = run_model_queue(runner, args.producers, args.model_frames, args.slots)
        runner.close()
        print(
            f"model (EfficientNet-Lite0): fd-shared {fd:.1f} frames/s, "
            f"pickled queue {q:.1f} frames/s, ratio {fd / q:.2f}x"
        )
    fds, queues = [], []
    for _ in range(args.repeats):
        fds.append(run_fd_shared(args.producers, args.frames, args.slots))
        queues.append(run_queue(args.producers, args.frames, args.slots))
    fd, q = statistics.median(fds), statistics.median(queues)
    print(
        f"transport runs: fd-shared {[round(x) for x in fds]}, queue {[round(x) for x in queues]}"
    )
    print(f"ipc: fd-shared {fd:.0f} frames/s, pickled queue {q:.0f} frames/s, ratio {fd / q:.2f}x")


if __name__ == "__main__":
    main()
