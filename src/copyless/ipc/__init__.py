"""Zero-copy across processes: tensors over Unix sockets, and a multi-process pipeline.

Two levels:

* :func:`send_tensors` / :func:`recv_tensors` move tensors between processes over a
  connected ``AF_UNIX`` socket: the metadata travels as a length-prefixed JSON header and
  the memory as file descriptors (``SCM_RIGHTS``). Nothing is copied: the receiver maps
  the same pages. Only XRT_BO and DMA_FD tensors can travel (``MemoryTypeError`` for the
  USER_POINTER types, raised before anything is sent). Received tensors are DMA_FD and own
  their descriptors.
* :class:`SlotPool` / :class:`SlotPipeline`: a pool of runner-allocated input slots, shared
  once with N producer processes. Producers decode frames straight into a slot's HW view
  and hand back the slot index; the consumer runs ``execute_async`` on it and yields the
  results. Per frame only two small control records travel (``filled`` and ``grant``,
  fixed binary structs read in bursts: see :mod:`copyless.ipc._control`).

Design of the pool:

* Slots are FREE, GRANTED to one producer, or with the CONSUMER. Producers ask for slots
  (``prefetch`` at a time) and block until granted, so frames in the system never exceed
  ``num_slots`` (back-pressure); grants go first-come, first-served across producers.
  Slots released by the consumer are granted at its next ``poll`` (one send per producer
  for all of them). The consumer never blocks on one producer: it reads what has arrived,
  so a producer that stalls mid-record holds up nobody.
* Producers are started with ``multiprocessing`` ``"spawn"`` (or ``"forkserver"``: the
  consumer runs threads, so no ``fork``) and connect back over an abstract Unix socket,
  authenticated by ``SO_PEERCRED`` (the pool's user, a pid it started) and a per-pool token.
  Handshakes run on the pool's selector with a deadline, never blocking ``poll``; a
  producer's requests are bounded (at most ``num_slots`` not yet granted).
* A producer that dies is seen at once (socket EOF and its process sentinel, watched by
  one ``selectors`` loop); the slots granted to it are reclaimed and the others go on.
  A consumer that dies gives every producer EOF: ``acquire``/``submit`` raise
  :class:`PeerClosedError` and the producer process exits with code 1.
* Nothing leaks: ``close()`` disconnects and reaps producers (terminate/kill after a
  grace period) and closes every socket; the slots' memfds go with the tensors. Memfds
  never appear in ``/dev/shm``.

Example (the consumer is the main process; ``decode_into`` is yours)::

    import copyless as cl
    from copyless.ipc import SlotPipeline

    def produce(producer, paths):                 # runs in a spawned child process
        for path in paths:
            slot = producer.acquire()             # waits while every slot is busy
            decode_into(slot.tensors[0].numpy(), path)   # straight into the HW view
            producer.submit(slot, tag=path)       # only the index and tag travel

    if __name__ == "__main__":
        runner = cl.RunnerFactory.create_runner("model.rai")
        ins = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        outs = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        with SlotPipeline(runner, ins, outs, num_slots=8) as pipeline:
            pipeline.start_producer(produce, ["a.jpg", "b.jpg"])
            pipeline.start_producer(produce, ["c.jpg"])
            for result in pipeline.results():     # in submission order
                print(result.tag, result.status, result.outputs[0].numpy().argmax())

Copies: none on the way from a producer to the engine. ``FrameResult.outputs`` are the
slot's output tensors, reused once the iteration moves on: copy what you keep.
Errors: :class:`IpcError` (a ``CopylessError``) for garbage, truncated, oversized, too
deeply nested or late messages (every message has a deadline, see :mod:`._wire`) and for
descriptors the sender could resize under the receiver (see :mod:`._transport`);
:class:`PeerClosedError` when the other side has gone.
"""

from __future__ import annotations

from ._errors import IpcError, PeerClosedError
from ._pipeline import AsyncRunner, FrameResult, SlotPipeline
from ._pool import FilledSlot, SlotAllocator, SlotPool
from ._producer import Producer, Slot
from ._transport import recv_tensors, send_tensors

__all__ = [
    "AsyncRunner",
    "FrameResult",
    "SlotPipeline",
    "FilledSlot",
    "IpcError",
    "PeerClosedError",
    "Producer",
    "Slot",
    "SlotAllocator",
    "SlotPool",
    "recv_tensors",
    "send_tensors",
]
