"""Memory layer: owned host memory, device memory wrapped without a copy, and the NpuTensor
view over either (an info over a :class:`Span`: owner, offset, size, device).

``cuda`` is the device-memory module (CuPy imported on first use): siblings call
``cuda.wrap_device``, ``cuda.copy_to_host``... through it, so a test that replaces one of its
functions replaces it for every caller.
"""

from . import _device as cuda
from ._device import DeviceMemory
from ._host import PAGE_SIZE, HostMemory
from ._seals import SIZE_SEALS, size_is_fixed
from ._span import Span
from ._tensor import NpuTensor, check_bounded

__all__ = [
    "PAGE_SIZE",
    "SIZE_SEALS",
    "DeviceMemory",
    "HostMemory",
    "NpuTensor",
    "Span",
    "check_bounded",
    "size_is_fixed",
    "cuda",
]
