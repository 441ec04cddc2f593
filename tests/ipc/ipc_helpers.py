"""Producer targets and a memfd allocator for the ipc tests (importable by spawned children)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from copyless.ipc import Producer
from copyless.memory import HostMemory, NpuTensor
from copyless.types import (
    DataType,
    MemoryLayout,
    MemoryType,
    NpuTensorInfo,
    TensorDirection,
    TensorType,
)

FRAME = NpuTensorInfo(
    "frame", DataType.UINT8, TensorDirection.INPUT, TensorType.HW, MemoryLayout.NHWC, (1, 8, 8, 3)
)
META = NpuTensorInfo(
    "meta", DataType.INT32, TensorDirection.INPUT, TensorType.HW, MemoryLayout.NC, (1, 2)
)


class MemfdAllocator:
    """Allocates slots the way the runner does: XRT_BO over HostMemory.shared."""

    def allocate_npu_tensor(self, info: NpuTensorInfo) -> NpuTensor:
        memory = HostMemory.shared(info.size_in_bytes, warn_on_leak=False)
        return NpuTensor._wrap_memory(info, memory, MemoryType.XRT_BO)


def stamp(producer_id: int, frame_id: int) -> int:
    return (producer_id * 37 + frame_id * 11) % 251


def produce_frames(producer: Producer, count: int, delay: float = 0.0) -> None:
    """Writes `count` frames, each filled with a stamp, and the ids into the meta tensor."""
    for frame_id in range(count):
        slot = producer.acquire(timeout=10)
        slot.tensors[0].numpy()[...] = stamp(producer.producer_id, frame_id)
        slot.tensors[1].numpy()[0] = (producer.producer_id, frame_id)
        if delay:
            time.sleep(delay)
        producer.submit(slot, tag={"frame": frame_id, "pid": os.getpid()})


def produce_forever(producer: Producer, pid_file: str) -> None:
    """Writes its pid, then produces until the consumer goes away."""
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    frame_id = 0
    while True:
        slot = producer.acquire(timeout=30)
        slot.tensors[0].numpy()[...] = stamp(producer.producer_id, frame_id)
        slot.tensors[1].numpy()[0] = (producer.producer_id, frame_id)
        producer.submit(slot, tag={"frame": frame_id, "pid": os.getpid()})
        frame_id += 1
        time.sleep(0.005)


def check_frame(tensors: Any) -> tuple[int, int]:
    """(producer, frame) from the meta tensor, after checking the frame bytes match."""
    producer_id, frame_id = (int(v) for v in tensors[1].numpy()[0])
    frame = tensors[0].numpy()
    expected = stamp(producer_id, frame_id)
    if not np.all(frame == expected):
        raise AssertionError(f"frame {producer_id}/{frame_id} holds wrong bytes")
    return producer_id, frame_id


def connect(address: str) -> Any:
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    return sock


def child_write(address: str, value: int) -> None:
    """Receives tensors, reports what the parent wrote, writes `value` into them."""
    from copyless.ipc import recv_tensors
    from copyless.ipc._wire import recv_message, send_message

    with connect(address) as sock:
        tensors = recv_tensors(sock)
        seen = [int(t.numpy().reshape(-1)[0]) for t in tensors]
        kinds = [t.memory_type.name for t in tensors]
        offsets = [t.offset for t in tensors]
        for tensor in tensors:
            tensor.numpy()[...] = value
        send_message(sock, {"seen": seen, "kinds": kinds, "offsets": offsets})
        recv_message(sock)  # the parent's go-ahead: keep the mapping until it has checked


def child_send_and_die(address: str) -> None:
    """Sends half a message, then dies without closing anything."""
    from copyless.ipc._wire import MAGIC, PREFIX

    sock = connect(address)
    sock.sendall(PREFIX.pack(MAGIC, 1000) + b'{"op":')
    os.kill(os.getpid(), 9)


def child_hang(address: str) -> None:
    """Connects and sleeps (is killed by the test)."""
    sock = connect(address)
    time.sleep(60)
    sock.close()


def consumer_with_producer(pid_file: str) -> None:
    """A consumer process (killed by the test) whose producer must notice its death."""
    from copyless.ipc import SlotPool

    pool = SlotPool(MemfdAllocator(), [FRAME, META], 2)
    pool.start_producer(produce_forever, pid_file)
    for item in pool.filled():
        pool.release(item.index)


def photo_chw(name: str) -> Any:
    """A skimage photo as the EfficientNet-Lite0 input: short side 256, centre 224, (x-127)/128."""
    from PIL import Image
    from skimage import data

    image = Image.fromarray(getattr(data, name)())
    scale = 256 / min(image.size)
    image = image.resize((round(image.width * scale), round(image.height * scale)))
    left, top = (image.width - 224) // 2, (image.height - 224) // 2
    crop = np.asarray(image.crop((left, top, left + 224, top + 224)), dtype=np.float32)
    return ((crop - 127.0) / 128.0).transpose(2, 0, 1)


def produce_photos(producer: Producer, names: list[str], repeats: int) -> None:
    """Preprocesses each photo straight into the slot's HW input view."""
    chw = {name: photo_chw(name) for name in names}
    for i in range(repeats):
        for name in names:
            slot = producer.acquire(timeout=30)
            np.copyto(slot.tensors[0].numpy()[0], chw[name])
            producer.submit(slot, tag={"photo": name, "i": i})


def produce_forever_photos(producer: Producer, pid_file: str) -> None:
    """Writes its pid, then feeds the cat photo until killed."""
    chw = photo_chw("chelsea")
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    while True:
        slot = producer.acquire(timeout=30)
        np.copyto(slot.tensors[0].numpy()[0], chw)
        producer.submit(slot, tag={"photo": "chelsea"})


def produce_then_garbage(producer: Producer, good: int, garbage: bytes, die: bool) -> None:
    """Submits `good` frames, takes one more slot, then writes raw bytes on the control
    stream (a broken or half-written record) and dies, or goes on asking for slots until
    it sees the consumer has dropped it (PeerClosedError: exit code 1)."""
    produce_frames(producer, good)
    producer.acquire(timeout=10)
    producer._sock.sendall(garbage)  # type: ignore[union-attr]
    if die:
        os.kill(os.getpid(), 9)
    while True:
        producer.acquire(timeout=10)
