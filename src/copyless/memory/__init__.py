"""Memory layer: owned host memory and the NpuTensor view over it."""

from .host import PAGE_SIZE, HostMemory
from .tensor import NpuTensor

__all__ = ["PAGE_SIZE", "HostMemory", "NpuTensor"]
