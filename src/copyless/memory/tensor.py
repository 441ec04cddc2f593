"""NpuTensor: tensor metadata over memory it never copies.

Four memory types (see :class:`~copyless.MemoryType`):

* ``USER_POINTER_NON_CMA`` / ``USER_POINTER_CMA``: a writable buffer-protocol object the
  caller owns (numpy array, bytearray, mmap, :class:`HostMemory`). The tensor keeps a
  reference to it, so the producer lives as long as the tensor.
* ``DMA_FD``: an ``int`` file descriptor (memfd, /dev/shm, dma-buf), mapped shared by the
  tensor. The fd stays the caller's: the tensor never closes it.
* ``XRT_BO``: runner-allocated, fd-backed memory owned by the tensor and released with the
  last reference (``Runner.allocate_npu_tensor``); always exportable as an fd.

No constructor or accessor here copies tensor bytes.
"""

from __future__ import annotations

import os
import weakref
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
from . import dlpack
from .host import HostMemory

_USER_POINTERS = (MemoryType.USER_POINTER_CMA, MemoryType.USER_POINTER_NON_CMA)


class NpuTensor:
    """A view of ``info`` over a buffer of ``memory_type``; wraps, never copies, never owns.

    Raises :class:`~copyless.TensorError` (a ``ValueError``) when the buffer is missing, too
    small, read-only, not contiguous or an unmappable fd, and
    :class:`~copyless.MemoryTypeError` when a HW view is put on pageable memory.
    """

    __slots__ = (
        "__weakref__",
        "_buffer",
        "_bytes",
        "_export_fd",
        "_info",
        "_memory",
        "_memory_type",
        "_offset",
        "_parent",
    )

    def __init__(self, info: NpuTensorInfo, buffer: Any, memory_type: MemoryType) -> None:
        _check_header(info, buffer, memory_type)
        self._info = info
        self._memory_type = memory_type
        self._buffer = buffer
        self._parent: NpuTensor | None = None
        self._offset = 0
        self._memory: HostMemory | None = None
        self._export_fd = -1
        if memory_type is MemoryType.DMA_FD:
            self._memory = HostMemory.from_fd(buffer, info.size_in_bytes)
            self._export_fd = buffer
            self._bytes = self._memory.array
        elif memory_type is MemoryType.XRT_BO:
            if not isinstance(buffer, HostMemory) or buffer.fd < 0:
                raise MemoryTypeError(
                    f"tensor {info.name!r}: XRT_BO tensors come from Runner.allocate_npu_tensor "
                    "or wrap fd-backed HostMemory.shared(); use DMA_FD for other fds"
                )
            self._memory = buffer
            self._bytes = buffer.array
        else:
            self._bytes = _host_bytes(info, buffer)
        _check_size(info, self._bytes.nbytes)

    # -- alternate constructors ---------------------------------------------------------
    @classmethod
    def from_numpy(
        cls,
        array: npt.NDArray[Any],
        *,
        name: str = "tensor",
        direction: TensorDirection = TensorDirection.INPUT,
        tensor_type: TensorType = TensorType.CPU,
        memory_layout: MemoryLayout | None = None,
        memory_type: MemoryType = MemoryType.USER_POINTER_NON_CMA,
    ) -> NpuTensor:
        """Wrap a C-contiguous numpy array, with an info derived from its shape and dtype."""
        layout = memory_layout or _default_layout(array.ndim)
        info = NpuTensorInfo(
            name,
            DataType.from_numpy(array.dtype),
            direction,
            tensor_type,
            layout,
            tuple(array.shape),
        )
        return cls(info, array, memory_type)

    @classmethod
    def from_dlpack(
        cls,
        producer: Any,
        info: NpuTensorInfo | None = None,
        memory_type: MemoryType = MemoryType.USER_POINTER_NON_CMA,
    ) -> NpuTensor:
        """Import a host DLPack producer (torch, numpy, ...) without a copy.

        The imported array keeps the producer's memory alive. Without ``info`` a CPU-view
        input info is derived from the producer's shape and dtype.
        """
        array = dlpack.host_array_from_dlpack(producer)
        if info is None:
            return cls.from_numpy(array, memory_type=memory_type)
        return cls(info, array, memory_type)

    @classmethod
    def _wrap_memory(
        cls, info: NpuTensorInfo, memory: HostMemory, memory_type: MemoryType
    ) -> NpuTensor:
        """A tensor that owns ``memory``: it is closed when the tensor is collected."""
        tensor = cls(info, memory, memory_type)
        weakref.finalize(tensor, memory.close)
        return tensor

    def _sub_tensor(self, info: NpuTensorInfo, offset: int) -> NpuTensor:
        """A view of ``info`` at byte ``offset`` of this tensor; keeps this tensor alive."""
        if self._parent is not None:
            raise TensorError(
                f"tensor {info.name!r}: sub-tensors of sub-tensors are not supported "
                "(one nesting level)"
            )
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise TensorError(
                f"sub-tensor {info.name!r}: offset must be an int >= 0, got {offset!r}"
            )
        end = offset + info.size_in_bytes
        if end > self._bytes.nbytes:
            raise TensorError(
                f"sub-tensor {info.name!r}: bytes [{offset}, {end}) exceed the parent "
                f"{self._info.name!r} of {self._bytes.nbytes} bytes"
            )
        sub = object.__new__(NpuTensor)
        sub._info = info
        sub._memory_type = self._memory_type
        sub._buffer = self._buffer
        sub._bytes = self._bytes[offset:end]
        sub._parent = self
        sub._offset = offset
        sub._memory = self._memory
        sub._export_fd = self._export_fd
        return sub

    # -- the VART-ML accessors ----------------------------------------------------------
    @property
    def info(self) -> NpuTensorInfo:
        return self._info

    @property
    def memory_type(self) -> MemoryType:
        return self._memory_type

    @property
    def parent(self) -> NpuTensor | None:
        """The tensor this is a sub-tensor of, or None."""
        return self._parent

    @property
    def offset(self) -> int:
        """Byte offset into the parent's buffer (0 for a tensor that is no sub-tensor)."""
        return self._offset

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer this tensor covers (at least ``info.size_in_bytes``)."""
        return int(self._bytes.nbytes)

    @property
    def address(self) -> int:
        """Address of the first byte, for every memory type (the engine binds this)."""
        return int(self._bytes.__array_interface__["data"][0])

    def get_info(self) -> NpuTensorInfo:
        return self._info

    def get_memory_type(self) -> MemoryType:
        return self._memory_type

    def get_buffer(self) -> Any:
        """The wrapped object: the fd for DMA_FD, the HostMemory for XRT_BO."""
        return self._buffer

    def get_virtual_address(self) -> int:
        """The host address of the data; 0 for DMA_FD (sentinel, never raises)."""
        if self._memory_type is MemoryType.DMA_FD:
            return 0
        try:
            return self.address
        except Exception:  # noqa: BLE001 - accessor contract: sentinel, never raise
            return 0

    def numpy(self) -> npt.NDArray[Any]:
        """A numpy array of ``info.shape``/``info.data_type`` sharing this tensor's memory."""
        info = self._info
        raw = self._bytes[: info.size_in_bytes]
        if info.strides is None:
            packed: npt.NDArray[Any] = raw.view(info.numpy_dtype).reshape(info.shape)
            return packed
        array: npt.NDArray[Any] = np.ndarray(
            info.shape, dtype=info.numpy_dtype, buffer=raw, strides=info.strides
        )
        return array

    def bytes_view(self) -> npt.NDArray[np.uint8]:
        """Flat uint8 view of the bytes this tensor covers (no copy)."""
        return self._bytes

    def sync_buffer(self) -> None:
        """Flush (INPUT) / invalidate (OUTPUT) for device access.

        Host memory and memfd mappings are cache-coherent with every backend copyless drives
        on the CPU, so this is a no-op there; it is always safe to call.
        """
        return None

    def export_buffer(self) -> int:
        """A NEW fd of this tensor's memory that the caller owns (XRT_BO, DMA_FD); else -1.

        For a sub-tensor the fd is the parent's whole buffer; :attr:`offset` says where the
        sub-tensor starts.
        """
        try:
            if self._memory_type is MemoryType.XRT_BO and self._memory is not None:
                return self._memory.export_fd()
            if self._memory_type is MemoryType.DMA_FD:
                return os.dup(self._export_fd)
        except OSError:
            return -1
        return -1

    # -- DLPack -------------------------------------------------------------------------
    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """Export the host memory through DLPack (no copy); BF16 included."""
        return dlpack.to_dlpack(self.numpy(), self, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (dlpack.DEVICE_CPU, 0)

    def __repr__(self) -> str:
        return f"<NpuTensor {self._info.describe()} {self._memory_type.name}>"


def _check_header(info: Any, buffer: Any, memory_type: Any) -> None:
    if not isinstance(info, NpuTensorInfo):
        raise TensorError(f"info must be an NpuTensorInfo, got {type(info).__name__}")
    if not isinstance(memory_type, MemoryType) or memory_type is MemoryType.UNKNOWN:
        raise MemoryTypeError(f"tensor {info.name!r}: memory type must be a known MemoryType")
    if info.data_type is DataType.UNKNOWN:
        raise TensorError(f"tensor {info.name!r}: data type UNKNOWN has no element size")
    if buffer is None:
        raise TensorError(f"tensor {info.name!r}: no buffer given")
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


def _host_bytes(info: NpuTensorInfo, buffer: Any) -> npt.NDArray[np.uint8]:
    """A flat writable uint8 view of a user buffer (no copy)."""
    if isinstance(buffer, HostMemory):
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
        if not view.c_contiguous:
            raise TensorError(f"tensor {info.name!r}: buffer is not C-contiguous")
        if view.readonly:
            raise TensorError(f"tensor {info.name!r}: buffer is read-only")
        flat = view if view.ndim == 1 and view.format == "B" else view.cast("B")
        return np.frombuffer(flat, np.uint8)
    if not array.flags.c_contiguous:
        raise TensorError(f"tensor {info.name!r}: numpy buffer is not C-contiguous")
    if not array.flags.writeable:
        raise TensorError(f"tensor {info.name!r}: numpy buffer is read-only")
    return array.reshape(-1).view(np.uint8)


def _check_size(info: NpuTensorInfo, nbytes: int) -> None:
    if nbytes < info.size_in_bytes:
        raise TensorError(
            f"tensor {info.name!r}: buffer of {nbytes} bytes is smaller than the "
            f"{info.size_in_bytes} bytes of {info.describe()}"
        )


def _default_layout(ndim: int) -> MemoryLayout:
    return {2: MemoryLayout.NC, 3: MemoryLayout.NHW, 4: MemoryLayout.NCHW}.get(
        ndim, MemoryLayout.GENERIC
    )
