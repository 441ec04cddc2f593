"""ipc layer (docstring written below)."""

from .errors import IpcError, PeerClosedError
from .pipeline import AsyncRunner, FrameResult, Pipeline
from .pool import FilledSlot, SlotAllocator, SlotPool
from .producer import Producer, Slot
from .transport import recv_tensors, send_tensors

__all__ = [
    "AsyncRunner",
    "FrameResult",
    "Pipeline",
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
