"""Device (CUDA) memory: other libraries' buffers wrapped without a copy, and ours exported.

:class:`DeviceMemory` is a span of device memory plus the object that keeps it alive (CuPy's
``UnownedMemory(ptr, size, owner)`` idea): a CuPy array, a PyTorch tensor, a consumed DLPack
producer, or a CuPy pool allocation of our own. Nothing here copies tensor bytes except the
two functions named ``copy_*``.

The binding is CuPy (``pip install copyless[cuda]``), imported on first use, so CPU users
never need it: parsing ``__cuda_array_interface__`` needs no CuPy; asking which device a
pointer lives on, consuming a DLPack capsule, allocating and copying do.

Producers :func:`wrap_device` takes, in this order:

* ``__cuda_array_interface__`` (CuPy, PyTorch, Numba): parsed here. A v3 ``"stream"`` entry
  is the stream the producer wrote on; it lands in :attr:`DeviceMemory.stream` and a CUDA
  runner makes its engine wait for that stream (an event, no host wait) before each run.
* ``__dlpack__`` on a CUDA device (JAX, ``OrtValue``, anything else): consumed by
  ``cupy.from_dlpack``, which asks the producer to order its writes before CuPy's current
  stream (the DLPack contract).

Our exports are complete when they are handed out (a runner's outputs are written when
``execute`` returns), so their ``__cuda_array_interface__`` carries no stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..types import DataType, TensorError, UnsupportedError

DLPACK_CUDA = 2
DLPACK_CUDA_MANAGED = 13
_CUDA_DLPACK = (DLPACK_CUDA, DLPACK_CUDA_MANAGED)
INSTALL_HINT = "pip install 'copyless[cuda]' (onnxruntime-gpu and cupy-cuda13x; see the README)"
# cudaMemoryType from cudaPointerGetAttributes: unregistered, host, device, managed.
_DEVICE_KINDS = (2, 3)


def cupy_module() -> Any:
    """CuPy, imported on first use; :class:`UnsupportedError` with the install hint and
    the reason (one line) when it is missing or cannot load its CUDA libraries."""
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - ImportError, or CuPy failing to load CUDA
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnsupportedError(f"CUDA memory needs CuPy ({reason}): {INSTALL_HINT}") from None
    return cupy


def device_count() -> int:
    """CUDA devices visible to this process; :class:`UnsupportedError` (one line) when there
    is no CuPy, no NVIDIA driver or no device."""
    cupy = cupy_module()
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError: no driver, driver too old
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnsupportedError(f"no usable NVIDIA driver or GPU here ({reason})") from None
    if count < 1:
        raise UnsupportedError("no CUDA device: the NVIDIA driver reports none")
    return count


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device ``ptr`` points into, or None for host memory (pageable,
    pinned or registered; managed memory counts as device memory)."""
    cupy = cupy_module()
    try:
        attributes = cupy.cuda.runtime.pointerGetAttributes(ptr)
    except Exception:  # noqa: BLE001 - memory CUDA never heard of (older drivers raise)
        return None
    if int(attributes.type) not in _DEVICE_KINDS:
        return None
    return int(attributes.device)


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """``nbytes`` of device memory at ``ptr`` on ``device_id``; ``owner`` keeps it alive.

    ``stream``: the producer stream a reader must wait on (``None``: the data is complete).
    """

    ptr: int
    nbytes: int
    device_id: int
    owner: object = None
    stream: int | None = None
    readonly: bool = False

    @property
    def device(self) -> str:
        """``"cuda:N"``: the name a runner's capabilities use."""
        return f"cuda:{self.device_id}"

    def view(self, offset: int, nbytes: int) -> DeviceMemory:
        """``nbytes`` at byte ``offset`` (bounds checked by the caller); keeps ``self`` alive."""
        return DeviceMemory(
            self.ptr + offset, nbytes, self.device_id, self, self.stream, self.readonly
        )


def is_device_producer(obj: object) -> bool:
    """Whether ``obj`` offers CUDA memory: ours, ``__cuda_array_interface__``, or DLPack
    on a CUDA device (a protocol check, as numpy does for ``__array_interface__``)."""
    if isinstance(obj, DeviceMemory) or hasattr(obj, "__cuda_array_interface__"):
        return True
    device = getattr(obj, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        return int(device()[0]) in _CUDA_DLPACK
    except Exception:  # noqa: BLE001 - a broken producer is no device producer
        return False


def wrap_device(obj: object, name: str) -> DeviceMemory:
    """``obj`` (see :func:`is_device_producer`) as :class:`DeviceMemory`, without a copy.

    Raises :class:`TensorError` naming tensor ``name`` for a malformed interface, strided
    or masked memory, or a producer that is not on a CUDA device.
    """
    if isinstance(obj, DeviceMemory):
        return obj
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cuda_array_interface(obj, name)
    return _from_dlpack(obj, name)


def _from_cuda_array_interface(obj: Any, name: str) -> DeviceMemory:
    cai = obj.__cuda_array_interface__
    what = f"tensor {name!r}: {type(obj).__name__}'s __cuda_array_interface__"
    if not isinstance(cai, dict) or not {"shape", "typestr", "data"} <= cai.keys():
        raise TensorError(f"{what} lacks shape, typestr or data")
    try:
        shape = tuple(int(d) for d in cai["shape"])
        itemsize = np.dtype(cai["typestr"]).itemsize
        ptr, readonly = int(cai["data"][0]), bool(cai["data"][1])
    except (TypeError, ValueError, IndexError) as exc:
        raise TensorError(f"{what} is malformed: {exc}") from None
    strides = cai.get("strides")
    if strides is not None and not _packed(shape, [int(s) for s in strides], itemsize):
        raise TensorError(f"{what} has strides {tuple(strides)}: pass contiguous memory")
    if cai.get("mask") is not None:
        raise TensorError(f"{what} is masked; masked arrays are not supported")
    stream = cai.get("stream")
    if stream == 0 or isinstance(stream, bool) or not isinstance(stream, (int, type(None))):
        raise TensorError(f"{what} has stream {stream!r} (the interface disallows 0)")
    nbytes = math.prod(shape) * itemsize
    if ptr == 0 and nbytes:
        raise TensorError(f"{what} has a null pointer")
    device_id = pointer_device(ptr)
    if device_id is None:
        raise TensorError(f"{what} points at host memory ({ptr:#x}), not device memory")
    return DeviceMemory(ptr, nbytes, device_id, obj, stream, readonly)


def _from_dlpack(obj: Any, name: str) -> DeviceMemory:
    kind, device_id = (int(v) for v in obj.__dlpack_device__())
    if kind not in _CUDA_DLPACK:
        raise TensorError(
            f"tensor {name!r}: {type(obj).__name__} lives on DLPack device {kind}, not CUDA"
        )
    cupy = cupy_module()
    try:
        array = cupy.from_dlpack(obj)  # the producer orders its writes (DLPack contract)
    except Exception as exc:  # noqa: BLE001 - BufferError, TypeError from the producer
        raise TensorError(f"tensor {name!r}: cannot import {type(obj).__name__}: {exc}") from None
    if not array.flags.c_contiguous:
        raise TensorError(f"tensor {name!r}: {type(obj).__name__} is not contiguous")
    return DeviceMemory(int(array.data.ptr), int(array.nbytes), device_id, array)


def _packed(shape: tuple[int, ...], strides: list[int], itemsize: int) -> bool:
    step = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides), strict=True):
        if dim != 1 and stride != step:
            return False
        step *= dim
    return True


def allocate(nbytes: int, device_id: int) -> DeviceMemory:
    """New, uninitialised device memory from CuPy's pool on ``device_id``; returned to the
    pool when the last holder of the result goes."""
    cupy = cupy_module()
    with cupy.cuda.Device(device_id):
        block = cupy.cuda.alloc(max(1, nbytes))
    return DeviceMemory(int(block.ptr), nbytes, device_id, block)


def allocate_on(device: str, nbytes: int) -> DeviceMemory:
    """:func:`allocate` on a device named as :attr:`DeviceMemory.device` gives it
    (``"cuda:N"``)."""
    kind, _, index = device.partition(":")
    if kind != "cuda" or not index.isdigit():
        raise TensorError(f"cannot allocate device memory on {device!r}")
    return allocate(nbytes, int(index))


def as_cupy(memory: DeviceMemory, shape: tuple[int, ...], data_type: DataType) -> Any:
    """A CuPy array over ``memory`` (no copy; it keeps ``memory`` alive)."""
    cupy = cupy_module()
    raw = cupy.cuda.UnownedMemory(memory.ptr, memory.nbytes, memory, memory.device_id)
    return cupy.ndarray(shape, data_type.to_numpy(), cupy.cuda.MemoryPointer(raw, 0))


def cuda_array_interface(
    memory: DeviceMemory, shape: tuple[int, ...], data_type: DataType
) -> dict[str, Any]:
    """``__cuda_array_interface__`` v3 of ``memory`` (C order; the data is complete)."""
    return {
        "shape": shape,
        "typestr": data_type.to_numpy().str,
        "data": (memory.ptr, memory.readonly),
        "strides": None,
        "version": 3,
        "stream": None,
    }


def copy_to_device(memory: DeviceMemory, host: npt.NDArray[Any]) -> None:
    """H2D copy of the C-contiguous ``host`` into ``memory`` (a copy); returns when done."""
    _copy(memory.ptr, int(host.ctypes.data), host.nbytes, to_device=True)


def copy_to_host(host: npt.NDArray[Any], memory: DeviceMemory) -> None:
    """D2H copy of ``memory`` into the C-contiguous, writable ``host`` (a copy); returns
    when done."""
    _copy(int(host.ctypes.data), memory.ptr, host.nbytes, to_device=False)


def _copy(dst: int, src: int, nbytes: int, *, to_device: bool) -> None:
    runtime = cupy_module().cuda.runtime
    kind = runtime.memcpyHostToDevice if to_device else runtime.memcpyDeviceToHost
    runtime.memcpy(dst, src, nbytes, kind)  # synchronous for the host


__all__ = [
    "DLPACK_CUDA",
    "DLPACK_CUDA_MANAGED",
    "INSTALL_HINT",
    "DeviceMemory",
    "allocate",
    "allocate_on",
    "as_cupy",
    "copy_to_device",
    "copy_to_host",
    "cuda_array_interface",
    "cupy_module",
    "device_count",
    "is_device_producer",
    "pointer_device",
    "wrap_device",
]
