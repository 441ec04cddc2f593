"""Inference over a slot pool: producers fill input slots, the consumer runs the model.

:class:`SlotPipeline` owns a :class:`~copyless.ipc.SlotPool` whose slots a runner allocated,
one set of output tensors per slot, and the loop that submits filled slots with
``execute_async`` and yields results in submission order.

Why this is not a :class:`copyless.Pipeline`: the items are filled by other processes,
so nothing is left for a ``prepare`` to do; the slots are the producers' shared memory,
handed back (``release``) over the pool's sockets, which only the consumer's thread may
drive (``SlotPool.poll``), where a Pipeline pulls and finishes items on its worker
threads; and a result hands the consumer the slot's output tensors themselves (reused
when the iteration moves on) instead of what a ``finish`` copied out. It is also below
the runner layer (it drives any :class:`AsyncRunner`), where ``copyless.pipeline`` sits
above it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..memory import NpuTensor
from ..types import JobHandle, NpuTensorInfo, StatusCode, TensorError
from ._pool import FilledSlot, SlotPool
from ._producer import ProducerTarget

logger = logging.getLogger(__name__)

_DRAIN_MS = 30_000


class AsyncRunner(Protocol):
    """The part of :class:`copyless.runner.Runner` a pipeline uses (ipc never imports it)."""

    def allocate_npu_tensor(self, info: NpuTensorInfo) -> NpuTensor: ...

    def execute_async(
        self, inputs: Any, outputs: Any, callback: Callable[[JobHandle], Any] | None = None
    ) -> JobHandle: ...

    def wait(self, job_handle: Any, timeout_ms: Any = ...) -> StatusCode: ...


@dataclass(frozen=True, slots=True)
class FrameResult:
    """One frame's outcome. ``outputs`` are the slot's output tensors: valid until the
    iteration moves on (the slot is reused then), so copy what you keep."""

    producer: int
    tag: Any
    status: StatusCode
    outputs: tuple[NpuTensor, ...]


class SlotPipeline:
    """Producers (processes) -> shared input slots -> ``runner.execute_async`` -> results.

    ``input_infos`` / ``output_infos`` are the model's views as the runner reports them
    (``get_tensors_info(direction, TensorType.HW)`` for zero-copy input). At most
    ``max_in_flight`` jobs are submitted at once; filled slots wait in the consumer, and
    producers wait for free slots, so memory stays bounded by ``num_slots``.
    """

    def __init__(
        self,
        runner: AsyncRunner,
        input_infos: Sequence[NpuTensorInfo],
        output_infos: Sequence[NpuTensorInfo],
        num_slots: int = 8,
        *,
        max_in_flight: int = 2,
        prefetch: int = 1,
        context: str = "spawn",
    ) -> None:
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
            raise TensorError(f"max_in_flight must be an int >= 1, got {max_in_flight!r}")
        if max_in_flight < 1 or not output_infos:
            raise TensorError("a pipeline needs max_in_flight >= 1 and at least one output")
        self._runner = runner
        self._pool = SlotPool(runner, input_infos, num_slots, prefetch=prefetch, context=context)
        self._outputs = tuple(
            tuple(runner.allocate_npu_tensor(info) for info in output_infos)
            for _ in range(num_slots)
        )
        self._max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._finished: set[int] = set()
        self._in_flight: deque[tuple[FilledSlot, JobHandle]] = deque()

    @property
    def pool(self) -> SlotPool:
        return self._pool

    def start_producer(self, target: ProducerTarget, *args: Any) -> int:
        """See :meth:`SlotPool.start_producer`."""
        return self._pool.start_producer(target, *args)

    def results(self) -> Iterator[FrameResult]:
        """Results in submission order until every producer has finished and drained."""
        pending: deque[FilledSlot] = deque()
        while True:
            self._submit(pending)
            while self._in_flight and self._done(self._in_flight[0][1]):
                item, handle = self._in_flight.popleft()
                ok = handle.status is StatusCode.SUCCESS
                # The callback may run just before the job's final status is recorded
                # (so that wait() can report a callback's exception): wait, do not poll.
                status = self._runner.wait(handle, _DRAIN_MS) if ok else handle.status
                yield FrameResult(item.producer, item.tag, status, self._outputs[item.index])
                self._pool.release(item.index)
            if not self._in_flight and not pending and self._pool.running == 0:
                return
            # Block until a producer or a job callback wakes us, except when the runner
            # refused work with nothing of ours in flight (it is busy with other users).
            blocked = bool(pending) and not self._in_flight
            pending.extend(self._pool.poll(0.001 if blocked else None))

    def close(self) -> None:
        """Wait for jobs in flight, then close the pool (reaping producers)."""
        while self._in_flight:
            _, handle = self._in_flight.popleft()
            self._runner.wait(handle, _DRAIN_MS)
        self._pool.close()
        self._outputs = ()

    def __enter__(self) -> SlotPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _submit(self, pending: deque[FilledSlot]) -> None:
        while pending and len(self._in_flight) < self._max_in_flight:
            item = pending[0]
            handle = self._runner.execute_async(
                [list(item.tensors)], [list(self._outputs[item.index])], self._on_done
            )
            if handle.status is StatusCode.RESOURCE_UNAVAILABLE:
                return  # the runner is full (other users): retry after the next event
            pending.popleft()
            if handle.status is not StatusCode.SUCCESS:
                logger.error("frame %r refused by the runner: %s", item.tag, handle.status.name)
            self._in_flight.append((item, handle))

    def _on_done(self, handle: JobHandle) -> None:
        # Runs on a runner worker thread: record, then wake the consumer's poll().
        with self._lock:
            self._finished.add(handle.job_id)
        self._pool.wake()

    def _done(self, handle: JobHandle) -> bool:
        with self._lock:
            if handle.job_id in self._finished and handle.status is StatusCode.SUCCESS:
                self._finished.discard(handle.job_id)
                return True
        return handle.status is not StatusCode.SUCCESS
