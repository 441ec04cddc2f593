"""Memory layer: owned host memory and the NpuTensor view over it."""

from ._host import PAGE_SIZE, HostMemory
from ._tensor import NpuTensor

__all__ = ["PAGE_SIZE", "HostMemory", "NpuTensor"]
