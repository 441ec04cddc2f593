"""Spans: a byte range of memory and the object that keeps it alive (CuPy's model).

CuPy separates allocation from views: ``MemoryPointer(mem, offset)`` keeps its allocation
alive and an ``ndarray`` sits on a pointer. Here a :class:`Span` is ``owner`` (what keeps
the bytes alive: a :class:`HostMemory`, the caller's buffer, a :class:`DeviceMemory`),
``offset``, ``size`` and ``device``, plus the host bytes as a flat uint8 view when they are
in host memory. Host and device spans behave alike: :meth:`Span.sub` is the one way to a
sub-range (no copy), :attr:`Span.ptr` the address an engine binds. An
:class:`~copyless.memory.NpuTensor` is an info over a span; closing it drops the span.

The functions below build a span from what a tensor is given (a buffer, an fd, device
memory), with the checks that make it safe to bind; none of them copies tensor bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..types import (
    DataType,
    MemoryLayout,
    MemoryType,
    MemoryTypeError,
    NpuTensorInfo,
    TensorDirection,
    TensorError,
    TensorType,
)
from . import _device
from . import _dmabuf as dmabuf
from ._host import HostMemory

HOST = "cpu"  #: the device name of host memory


@dataclass(frozen=True, slots=True)
class Span:
    """``size`` bytes at ``offset`` of ``owner``'s memory, on ``device``.

    ``host`` is the bytes as a flat uint8 numpy view (host memory), None on a device, where
    ``owner`` is the :class:`DeviceMemory` covering exactly this span."""

    owner: Any
    offset: int
    size: int
    device: str = HOST
    host: npt.NDArray[np.uint8] | None = None

    @property
    def ptr(self) -> int:
        """The address of the first byte (a device pointer on a GPU)."""
        if self.host is None:
            return int(self.owner.ptr)
        return int(self.host.__array_interface__["data"][0])

    @property
    def writable(self) -> bool:
        if self.host is None:
            return not self.owner.readonly
        return bool(self.host.flags.writeable)

    def sub(self, offset: int, size: int) -> Span:
        """The ``size`` bytes at ``offset`` of this span (bounds checked by the caller)."""
        if self.host is None:
            view = self.owner.view(offset, size)
            return Span(view, self.offset + offset, size, self.device)
        host = self.host[offset : offset + size]
        return Span(self.owner, self.offset + offset, size, HOST, host)


def span_of(info: NpuTensorInfo, buffer: Any, memory_type: MemoryType, *, own_fd: bool) -> Span:
    """The span a tensor of ``info`` covers over ``buffer`` (checked by :func:`check_header`
    first): device memory, an fd mapped here (``own_fd``: the span's :class:`HostMemory`
    closes ``buffer`` itself, else a private duplicate), fd-backed XRT_BO memory, or a
    buffer-protocol object."""
    if memory_type is not MemoryType.DMA_FD and _device.is_device_producer(buffer):
        return device_span(info, buffer, memory_type)
    if memory_type is MemoryType.DMA_FD:
        try:
            # Private mapping plus a private dup (or the fd itself when owned); only the
            # bytes the info covers are mapped (sealed memfds keep them there, see _seals).
            memory = HostMemory.from_fd(
                buffer, own_fd=own_fd, dup=not own_fd, map_bytes=info.size_in_bytes
            )
        except TensorError as exc:
            raise TensorError(f"tensor {info.name!r}: {exc}") from exc
        return memory_span(info, memory)
    if memory_type is MemoryType.XRT_BO and (not isinstance(buffer, HostMemory) or buffer.fd < 0):
        raise MemoryTypeError(
            f"tensor {info.name!r}: XRT_BO tensors come from Runner.allocate_npu_tensor "
            "or wrap fd-backed HostMemory.shared(); use DMA_FD for other fds"
        )
    return host_span(info, buffer)


def host_span(info: NpuTensorInfo, buffer: Any) -> Span:
    """A span over a buffer-protocol object or :class:`HostMemory` (no copy): read-only
    buffers for INPUT tensors only."""
    data = _host_bytes(info, buffer)
    check_size(info, data.nbytes)
    return Span(buffer, 0, int(data.nbytes), HOST, data)


def memory_span(info: NpuTensorInfo, memory: HostMemory) -> Span:
    """A span over all of ``memory`` (an fd mapping or runner-allocated memory)."""
    data = memory.array
    check_size(info, data.nbytes)
    return Span(memory, 0, int(data.nbytes), HOST, data)


def device_span(info: NpuTensorInfo, buffer: Any, memory_type: MemoryType) -> Span:
    """A span over device memory: ours, ``__cuda_array_interface__`` or CUDA DLPack."""
    if memory_type is MemoryType.USER_POINTER_NON_CMA:
        raise MemoryTypeError(
            f"tensor {info.name!r}: device memory is USER_POINTER_CMA (the device reads it "
            "directly), not USER_POINTER_NON_CMA"
        )
    _check_device_elements(info, buffer)
    memory = _device.wrap_device(buffer, info.name)
    if memory.readonly and info.direction is TensorDirection.OUTPUT:
        raise TensorError(
            f"tensor {info.name!r}: the device buffer is read-only, and an OUTPUT tensor is "
            "written by the engine"
        )
    check_size(info, memory.nbytes)
    return Span(memory, 0, memory.nbytes, memory.device)


def _check_device_elements(info: NpuTensorInfo, buffer: Any) -> None:
    """The element-type rule for a ``__cuda_array_interface__`` producer (CuPy, Numba); a
    malformed interface is left to :func:`~copyless.memory._device.wrap_device` to refuse."""
    cai = getattr(buffer, "__cuda_array_interface__", None)
    typestr = cai.get("typestr") if isinstance(cai, dict) else None
    try:
        dtype = np.dtype(typestr) if isinstance(typestr, str) else None
    except TypeError:
        dtype = None
    if dtype is not None:
        check_element_type(info, dtype, f"{type(buffer).__name__} device array")


def check_header(info: Any, buffer: Any, memory_type: Any) -> None:
    """What every tensor needs before any memory is touched: a known memory type, an
    element size, a bounded shape, a buffer of the kind ``memory_type`` takes."""
    if not isinstance(info, NpuTensorInfo):
        raise TensorError(f"info must be an NpuTensorInfo, got {type(info).__name__}")
    if not isinstance(memory_type, MemoryType) or memory_type is MemoryType.UNKNOWN:
        raise MemoryTypeError(
            f"tensor {info.name!r}: memory type must be a known MemoryType, got {memory_type!r}"
        )
    if info.data_type is DataType.UNKNOWN:
        raise TensorError(f"tensor {info.name!r}: data type UNKNOWN has no element size")
    check_bounded(info)
    if buffer is None:
        raise TensorError(f"tensor {info.name!r}: no buffer given (None)")
    if info.tensor_type is TensorType.HW and memory_type is MemoryType.USER_POINTER_NON_CMA:
        raise MemoryTypeError(
            f"tensor {info.name!r}: a HW-view tensor needs device-visible memory "
            "(XRT_BO, DMA_FD or USER_POINTER_CMA), not USER_POINTER_NON_CMA"
        )
    not_fd = isinstance(buffer, bool) or not isinstance(buffer, int)
    if memory_type is MemoryType.DMA_FD and not_fd:
        raise TensorError(
            f"tensor {info.name!r}: a DMA_FD tensor wraps an int file descriptor, "
            f"got {type(buffer).__name__}"
        )
    if memory_type is not MemoryType.DMA_FD and not not_fd:
        raise TensorError(
            f"tensor {info.name!r}: an int ({buffer}) is only a buffer for DMA_FD, "
            f"not {memory_type.name}"
        )


def check_sub_span(parent: NpuTensorInfo, span: Span, info: NpuTensorInfo, offset: Any) -> None:
    """The checks of a sub-tensor of ``info`` at byte ``offset`` of ``span`` (the tensor
    ``parent``'s), host and device alike."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise TensorError(f"sub-tensor {info.name!r}: offset must be an int >= 0, got {offset!r}")
    itemsize = info.data_type.itemsize
    if offset % itemsize:
        raise TensorError(
            f"sub-tensor {info.name!r}: offset {offset} is not a multiple of the "
            f"{itemsize}-byte {info.data_type.name} element"
        )
    end = offset + info.size_in_bytes
    if info.direction is TensorDirection.OUTPUT and not span.writable:
        raise TensorError(
            f"sub-tensor {info.name!r}: an OUTPUT tensor needs writable memory, and "
            f"{parent.name!r} wraps a read-only buffer"
        )
    if end > span.size:
        raise TensorError(
            f"sub-tensor {info.name!r}: bytes [{offset}, {end}) exceed the parent "
            f"{parent.name!r} of {span.size} bytes (offset {offset})"
        )


def check_bounded(info: NpuTensorInfo) -> None:
    """TensorError for an info with -1 dims (data-dependent, no bound known)."""
    if not info.bounded:
        raise TensorError(
            f"tensor {info.name!r}: shape {list(info.shape)} has data-dependent dims with no "
            "known bound (-1); replace them with the capacity you want, e.g. "
            "dataclasses.replace(info, shape=(...))"
        )


def check_size(info: NpuTensorInfo, nbytes: int) -> None:
    if nbytes < info.size_in_bytes:
        raise TensorError(
            f"tensor {info.name!r}: buffer of {nbytes} bytes is smaller than the "
            f"{info.size_in_bytes} bytes of {info.describe()}"
        )


def _host_bytes(info: NpuTensorInfo, buffer: Any) -> npt.NDArray[np.uint8]:
    """A flat uint8 view of a user buffer (no copy): read-only buffers for INPUT only."""
    readonly_ok = info.direction is TensorDirection.INPUT
    if isinstance(buffer, HostMemory):
        if buffer.closed:
            raise TensorError(f"tensor {info.name!r}: {buffer!r} is closed")
        return buffer.array
    if isinstance(buffer, np.ndarray):
        array = buffer
    else:
        try:
            view = memoryview(buffer)
        except TypeError:
            raise TensorError(
                f"tensor {info.name!r}: {type(buffer).__name__} does not expose a buffer"
            ) from None
        if view.readonly and not readonly_ok:
            raise TensorError(
                f"tensor {info.name!r}: {type(buffer).__name__} buffer is read-only, and an "
                "OUTPUT tensor is written by the engine (INPUT tensors may be read-only)"
            )
        if not view.c_contiguous:
            raise TensorError(f"tensor {info.name!r}: buffer is not C-contiguous")
        check_element_type(info, _view_dtype(info, view), type(buffer).__name__)
        flat = view if view.ndim == 1 and view.format == "B" else view.cast("B")
        return np.frombuffer(flat, np.uint8)
    if not array.flags.writeable and not readonly_ok:
        raise TensorError(
            f"tensor {info.name!r}: numpy buffer is read-only, and an OUTPUT tensor is "
            "written by the engine (INPUT tensors may be read-only)"
        )
    if not array.flags.c_contiguous:
        raise TensorError(
            f"tensor {info.name!r}: numpy buffer is not C-contiguous (strides {array.strides})"
        )
    check_element_type(info, array.dtype, "numpy array")
    return array.reshape(-1).view(np.uint8)


def check_element_type(info: NpuTensorInfo, dtype: np.dtype[Any], what: str) -> None:
    """TensorError when a typed buffer holds other elements than ``info.data_type``: a
    float64 array under a FLOAT32 info would be read as garbage. Raw bytes (uint8, void and
    single-byte string elements: bytearray, bytes, mmap, ``np.uint8`` arrays) are taken as
    the info's bytes, whatever its type."""
    if is_raw_bytes(dtype) or dtype == info.numpy_dtype:
        return
    raise TensorError(
        f"tensor {info.name!r}: the {what} holds {dtype} elements, the info says "
        f"{info.data_type.name} ({np.dtype(info.numpy_dtype)}); pass an array of that dtype, "
        "or its raw bytes (arr.view(np.uint8))"
    )


def is_raw_bytes(dtype: np.dtype[Any]) -> bool:
    """Whether elements of ``dtype`` are untyped bytes (uint8, void, one-byte strings)."""
    return dtype == np.uint8 or dtype.kind == "V" or (dtype.kind == "S" and dtype.itemsize == 1)


def _view_dtype(info: NpuTensorInfo, view: memoryview) -> np.dtype[Any]:
    """The element type a memoryview's format names (PEP 3118, as numpy reads it)."""
    if view.format in ("B", "c"):
        return np.dtype(np.uint8)
    try:
        return np.asarray(view).dtype  # no copy: numpy reads the buffer's format
    except (TypeError, ValueError, NotImplementedError):
        raise TensorError(
            f"tensor {info.name!r}: buffer of element format {view.format!r} is not one "
            "numpy reads; pass its raw bytes (a uint8 view)"
        ) from None


def info_of_array(
    array: Any,
    name: str,
    direction: TensorDirection,
    tensor_type: TensorType,
    layout: MemoryLayout | None,
) -> NpuTensorInfo:
    """The info of a numpy array wrapped as it is (its shape and dtype)."""
    if not isinstance(array, np.ndarray):
        raise TensorError(f"tensor {name!r}: expected a numpy array, got {type(array).__name__}")
    try:
        data_type = DataType.from_numpy(array.dtype)
    except ValueError as exc:
        raise TensorError(f"tensor {name!r}: {exc}") from None
    default = {2: MemoryLayout.NC, 3: MemoryLayout.NHW, 4: MemoryLayout.NCHW}.get(
        array.ndim, MemoryLayout.GENERIC
    )
    shape = tuple(array.shape)
    return NpuTensorInfo(name, data_type, direction, tensor_type, layout or default, shape)


def fd_memory(span: Span | None, memory_type: MemoryType) -> HostMemory | None:
    """The fd-backed memory under an XRT_BO or DMA_FD tensor's span on the host, else None."""
    if span is None or memory_type not in (MemoryType.XRT_BO, MemoryType.DMA_FD):
        return None
    return span.owner if isinstance(span.owner, HostMemory) else None


def export_fd(memory: HostMemory | None, memory_type: MemoryType) -> int:
    """A new fd of ``memory`` for the caller, or -1 (none, or ``dup`` failed)."""
    if memory is None:
        return -1
    try:
        if memory_type is MemoryType.XRT_BO:
            return memory.export_fd()
        return os.dup(memory.fd) if memory.fd >= 0 else -1
    except OSError:
        return -1


def sync_dmabuf(memory: HostMemory | None, info: NpuTensorInfo) -> None:
    """``DMA_BUF_IOCTL_SYNC`` for the device to read (INPUT) or the CPU to read (OUTPUT)
    ``memory`` when it is a dma-buf; nothing otherwise."""
    if memory is None or not memory.is_dmabuf:
        return
    try:
        dmabuf.sync(memory.fd, device_reads=info.direction is TensorDirection.INPUT)
    except OSError as exc:
        raise TensorError(f"tensor {info.name!r}: dma-buf sync failed: {exc}") from exc
