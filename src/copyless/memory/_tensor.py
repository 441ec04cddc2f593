"""NpuTensor: tensor metadata over memory it never copies (and owns only when told to).

Four memory types (see :class:`~copyless.MemoryType`):

* ``USER_POINTER_NON_CMA`` / ``USER_POINTER_CMA``: a buffer-protocol object the caller
  owns (numpy array, bytearray, mmap, :class:`HostMemory`). The tensor keeps a reference to
  it, so the producer lives as long as the tensor. An INPUT tensor may wrap a read-only
  buffer (Ray's object store, ``np.frombuffer(bytes)``, a read-only mmap) without a copy:
  its :meth:`NpuTensor.numpy` view is read-only too. An OUTPUT tensor needs a writable one.
* ``DMA_FD``: an ``int`` file descriptor (memfd, /dev/shm, dma-buf), mapped shared by the
  tensor. ``NpuTensor(info, fd, DMA_FD)`` leaves the fd the caller's (never closed by the
  tensor): it maps the fd and keeps a private duplicate (closed with the tensor), so
  :meth:`NpuTensor.export_buffer` never hands out whatever number the caller's fd was later
  reused for. ``NpuTensor.from_fd(info, fd, take_ownership=True)`` instead makes the tensor
  the owner of ``fd``, closed with it (fds received from another process).
* ``XRT_BO``: runner-allocated, fd-backed memory owned by the tensor and released with the
  last reference (``Runner.allocate_npu_tensor``); always exportable as an fd. On a CUDA
  runner it is device memory instead (CuPy's pool), exported through DLPack, not as an fd.

Device memory: ``USER_POINTER_CMA`` also wraps CUDA memory, any object with
``__cuda_array_interface__`` or a CUDA ``__dlpack__`` (a CuPy array, a PyTorch CUDA tensor;
see :mod:`copyless.memory._device`). :attr:`NpuTensor.device` then says ``"cuda:N"``,
:attr:`NpuTensor.address` is the device pointer, ``numpy()`` raises (the bytes are not in
host memory) and ``__dlpack__`` / ``__cuda_array_interface__`` hand the memory to CuPy or
PyTorch without a copy. A runner binds it in place where its backend declares that device.

Memory model (CuPy's): a tensor is an info over a :class:`~copyless.memory._span.Span`
(owner, offset, size, device), host and device memory alike, so no accessor branches on
"am I on a device" beyond what a span says. A sub-tensor is a span's ``sub`` (one path for
both). Closing drops the span: ``_span is None`` is what "closed" means, and what the
runner's C fast path checks.

Lifetimes: a tensor keeps its producer (buffer, mapping) alive through its span's owner; a
sub-tensor keeps its parent alive; numpy views and DLPack capsules keep the bytes alive
even after :meth:`NpuTensor.close`. No constructor or accessor here copies tensor bytes.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from ..types import (
    MemoryLayout,
    MemoryType,
    NpuTensorInfo,
    ReadOnly,
    TensorDirection,
    TensorError,
    TensorType,
)
from . import _device as _device
from . import _dlpack as dlpack
from ._device import DeviceMemory
from ._host import HostMemory
from ._span import (
    HOST,
    Span,
    check_bounded,
    check_header,
    check_sub_span,
    export_fd,
    fd_memory,
    info_of_array,
    span_of,
    sync_dmabuf,
)

__all__ = ["NpuTensor", "check_bounded"]


class NpuTensor:
    """A view of ``info`` over a buffer of ``memory_type``; wraps, never copies.

    It owns nothing it was given (the constructor's buffer or fd stays the caller's), and
    owns what it was handed for good: runner-allocated XRT_BO memory and the fd of
    ``from_fd(..., take_ownership=True)``, released by :meth:`close` or when collected.

    Raises :class:`~copyless.TensorError` (a ``ValueError``) when the buffer is missing, too
    small, read-only for an OUTPUT tensor, not contiguous, typed with another element type
    than ``info.data_type`` (a float64 array for a FLOAT32 info; raw bytes, uint8/void
    arrays, bytearray and mmap are taken as bytes) or an unmappable fd, and
    :class:`~copyless.MemoryTypeError` when a HW view is put on pageable memory. Every
    message names the tensor and the numbers involved.
    """

    __slots__ = (
        "__weakref__",
        "_buffer",
        "_finalizer",
        "_info",
        "_memory_type",
        "_offset",
        "_parent",
        "_produced_shape",
        "_span",
    )

    def __init__(self, info: NpuTensorInfo, buffer: Any, memory_type: MemoryType) -> None:
        self._setup(info, buffer, memory_type, own_fd=False)

    def _setup(
        self, info: NpuTensorInfo, buffer: Any, memory_type: MemoryType, *, own_fd: bool
    ) -> None:
        check_header(info, buffer, memory_type)
        self._info, self._memory_type, self._buffer, self._offset = info, memory_type, buffer, 0
        self._parent: NpuTensor | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._produced_shape: tuple[int, ...] | None = None
        self._span: Span | None = span_of(info, buffer, memory_type, own_fd=own_fd)
        if memory_type is MemoryType.DMA_FD:  # the mapping (and its fd) is the tensor's
            self._finalizer = weakref.finalize(self, self._span.owner.close)

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
        """Wrap a C-contiguous numpy array (no copy), info from its shape/dtype.

        A read-only array is accepted for an INPUT tensor only."""
        info = info_of_array(array, name, direction, tensor_type, memory_layout)
        return cls(info, array, memory_type)

    @classmethod
    def from_fd(cls, info: NpuTensorInfo, fd: int, *, take_ownership: bool = False) -> NpuTensor:
        """A DMA_FD tensor over ``fd`` (no copy).

        Without ``take_ownership`` this is ``NpuTensor(info, fd, MemoryType.DMA_FD)``: the
        caller keeps ``fd``. With it, the tensor also becomes the owner of ``fd`` and closes
        it when the tensor is closed or collected (e.g. fds received from another process).
        On a construction error ``fd`` is left open either way.
        """
        tensor = object.__new__(cls)
        tensor._setup(info, fd, MemoryType.DMA_FD, own_fd=take_ownership)
        return tensor

    @classmethod
    def from_dlpack(
        cls,
        producer: Any,
        info: NpuTensorInfo | None = None,
        memory_type: MemoryType = MemoryType.USER_POINTER_NON_CMA,
    ) -> NpuTensor:
        """Import a host DLPack producer (numpy, torch, ...) without a copy.

        The tensor keeps the producer's memory alive. Without ``info`` a CPU-view input info
        is derived from the producer's shape and dtype. Raises :class:`TensorError` for a
        producer that is not on the host, non-contiguous or of a dtype numpy's DLPack cannot
        import (e.g. bfloat16), or a read-only one for an OUTPUT tensor.
        """
        try:
            array = dlpack.host_array_from_dlpack(producer)
        except (BufferError, TypeError, ValueError) as exc:
            raise TensorError(
                f"cannot import {type(producer).__name__} through DLPack: {exc}"
            ) from exc
        if info is None:
            return cls.from_numpy(array, memory_type=memory_type)
        return cls(info, array, memory_type)

    @classmethod
    def _wrap_device(cls, info: NpuTensorInfo, memory: DeviceMemory) -> NpuTensor:
        """A runner-allocated (XRT_BO) tensor over device ``memory`` (it keeps it alive)."""
        return cls(info, memory, MemoryType.XRT_BO)

    @classmethod
    def _wrap_memory(
        cls, info: NpuTensorInfo, memory: HostMemory, memory_type: MemoryType
    ) -> NpuTensor:
        """A tensor that owns ``memory``: closed with :meth:`close` or when collected."""
        tensor = cls(info, memory, memory_type)
        tensor._finalizer = weakref.finalize(tensor, memory.close)
        return tensor

    def _sub_tensor(self, info: NpuTensorInfo, offset: int) -> NpuTensor:
        """A view of ``info`` at byte ``offset`` of this tensor; keeps this tensor alive.

        One nesting level; ``offset`` must be a multiple of the element size and the view
        must lie inside this tensor's bytes (no copy). Host and device memory alike.
        """
        span = self._live_span()
        check_header(info, self._buffer, self._memory_type)
        if self._parent is not None:
            raise TensorError(
                f"sub-tensor {info.name!r}: {self._info.name!r} is itself a sub-tensor "
                "(one nesting level)"
            )
        check_sub_span(self._info, span, info, offset)
        sub = object.__new__(NpuTensor)
        sub._info, sub._memory_type, sub._buffer = info, self._memory_type, self._buffer
        sub._span = span.sub(offset, info.size_in_bytes)
        sub._parent, sub._offset = self, offset  # the parent (and what it owns) lives on
        sub._finalizer, sub._produced_shape = None, None
        return sub

    # -- the VART-ML accessors ----------------------------------------------------------
    info = ReadOnly[NpuTensorInfo]("The tensor's metadata (shape, dtype, layout, view).")
    memory_type = ReadOnly[MemoryType]("Where the bytes live (see :class:`MemoryType`).")
    parent = ReadOnly["NpuTensor | None"]("The tensor this is a sub-tensor of, or None.")
    offset = ReadOnly[int]("Byte offset into the parent's buffer (0 for no sub-tensor).")
    span = ReadOnly["Span | None"]("The memory this tensor covers (None once closed).")

    @property
    def produced_shape(self) -> tuple[int, ...] | None:
        """For an output whose shape depends on the data: the shape the last job that wrote
        this tensor produced (set when the job ends: before its callback runs). The result
        sits C-contiguously at the start of the buffer; when it did not fit (the job ended
        with INVALID_OUTPUT) this is the shape needed. None otherwise."""
        return self._produced_shape

    @property
    def closed(self) -> bool:
        return self._span is None

    @property
    def device(self) -> str:
        """Where the bytes are: ``"cpu"`` (host memory) or ``"cuda:N"``."""
        return HOST if self._span is None else self._span.device

    @property
    def device_memory(self) -> DeviceMemory | None:
        """The device memory this tensor wraps (pointer, producer stream...); None on host."""
        span = self._span
        return span.owner if span is not None and span.host is None else None

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer this tensor covers (at least ``info.size_in_bytes``); 0 closed."""
        return 0 if self._span is None else self._span.size

    @property
    def address(self) -> int:
        """Address of the first byte, for every memory type (the engine binds this): a
        device pointer for device memory. Raises :class:`TensorError` after :meth:`close`.
        """
        return self._live_span().ptr

    def get_info(self) -> NpuTensorInfo:
        return self._info

    def get_memory_type(self) -> MemoryType:
        return self._memory_type

    def get_buffer(self) -> Any:
        """The wrapped object: the fd for DMA_FD, the HostMemory for XRT_BO; None if closed."""
        return None if self.closed else self._buffer

    def get_virtual_address(self) -> int:
        """The address of the data (the device pointer for device memory); 0 for DMA_FD on
        the host or a closed tensor (never raises)."""
        span = self._span
        if span is None or (span.host is not None and self._memory_type is MemoryType.DMA_FD):
            return 0
        return span.ptr

    def numpy(self) -> npt.NDArray[Any]:
        """A numpy array of ``info.shape``/``info.data_type`` sharing this tensor's memory.

        No copy; the array keeps the memory alive on its own. Raises after :meth:`close`.
        """
        info = self._info
        raw = self._host_bytes()[: info.size_in_bytes]
        if info.strides is None:
            packed: npt.NDArray[Any] = raw.view(info.numpy_dtype).reshape(info.shape)
            return packed
        array: npt.NDArray[Any] = np.ndarray(
            info.shape, dtype=info.numpy_dtype, buffer=raw, strides=info.strides
        )
        return array

    def produced(self) -> npt.NDArray[Any]:
        """:meth:`numpy` at :attr:`produced_shape`: the first elements of the buffer, where
        a data-dependent output's result sits C-contiguously; :meth:`numpy` itself where
        there is no produced shape. No copy. Raises TensorError after :meth:`close`, and
        when the produced shape does not fit the buffer (the job ended INVALID_OUTPUT:
        the shape is the one needed)."""
        shape = self._produced_shape
        if shape is None:
            return self.numpy()
        count = int(np.prod(shape, dtype=np.int64))
        info = self._info
        if count * info.numpy_dtype.itemsize > info.size_in_bytes:
            raise TensorError(
                f"tensor {info.name!r}: the produced shape {list(shape)} does not fit its "
                f"buffer of shape {list(info.shape)} (the job ended INVALID_OUTPUT)"
            )
        raw = self._host_bytes()[: count * info.numpy_dtype.itemsize]
        view: npt.NDArray[Any] = raw.view(info.numpy_dtype).reshape(shape)
        return view

    def bytes_view(self) -> npt.NDArray[np.uint8]:
        """Flat uint8 view of the bytes this tensor covers (no copy). Raises after close."""
        return self._host_bytes()

    @property
    def needs_sync(self) -> bool:
        """Whether :meth:`sync_buffer` does work: a DMA_FD tensor over a dma-buf, whose
        exporter may need the CPU caches flushed or invalidated (see :mod:`._dmabuf`)."""
        memory = fd_memory(self._span, self._memory_type)
        return memory is not None and memory.is_dmabuf

    def sync_buffer(self) -> None:
        """Flush (INPUT) / invalidate (OUTPUT) for device access.

        On a dma-buf this is the kernel's ``DMA_BUF_IOCTL_SYNC`` (the runner calls it around
        each job unless ``skip_in_bo_sync`` / ``skip_out_bo_sync``; then the application
        does). Host memory, memfds and locked memory are cache-coherent with every engine
        copyless drives on the CPU, so it is a no-op there; it is always safe to call.
        Raises TensorError when the kernel refuses the sync.
        """
        sync_dmabuf(fd_memory(self._span, self._memory_type), self._info)

    def export_buffer(self) -> int:
        """A NEW fd of this tensor's memory that the caller owns (XRT_BO, DMA_FD); else -1.

        For a sub-tensor the fd is the parent's whole buffer; :attr:`offset` says where the
        sub-tensor starts. -1 too after :meth:`close` or when ``dup`` fails (never raises).
        """
        return export_fd(fd_memory(self._span, self._memory_type), self._memory_type)

    def close(self) -> None:
        """Drop this tensor's hold on its memory now (idempotent).

        Memory the tensor owns (runner-allocated XRT_BO, a DMA_FD mapping and its private
        fd) is released: descriptors at once, pages when the last numpy view goes. A
        sub-tensor only lets go of its parent. Accessors then return their sentinels and
        ``numpy()`` raises.
        """
        self._span = None
        self._buffer = None
        self._parent = None
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> NpuTensor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- DLPack -------------------------------------------------------------------------
    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """Export the memory through DLPack (no copy): host memory through numpy, device
        memory through CuPy (``stream`` is the consumer's: our data is complete).

        The capsule keeps the memory alive. Host BF16 raises ``BufferError``: numpy's
        DLPack has no bfloat16 (use :meth:`numpy`).
        """
        memory = self.device_memory
        if memory is not None:
            array = _device.as_cupy(memory, self._info.shape, self._info.data_type)
            return array.__dlpack__(stream=stream, **kwargs)
        return dlpack.to_dlpack(self.numpy(), self, stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        memory = self.device_memory
        return (dlpack.DEVICE_CPU, 0) if memory is None else (_device.DLPACK_CUDA, memory.device_id)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The interface CuPy, PyTorch and Numba read (device memory only: host tensors
        raise ``AttributeError``, so ``hasattr`` tells them apart)."""
        memory = self.device_memory
        if memory is None:
            raise AttributeError("a host-memory NpuTensor has no __cuda_array_interface__")
        return _device.cuda_array_interface(memory, self._info.shape, self._info.data_type)

    def __repr__(self) -> str:
        where = ("" if self.device == HOST else f" on {self.device}") + " closed" * self.closed
        return f"<NpuTensor {self._info.describe()} {self._memory_type.name}{where}>"

    def _live_span(self) -> Span:
        if self._span is None:
            raise TensorError(f"tensor {self._info.name!r} is closed")
        return self._span

    def _host_bytes(self) -> npt.NDArray[np.uint8]:
        span = self._live_span()
        if span.host is None:
            raise TensorError(
                f"tensor {self._info.name!r} is device memory ({span.device}): "
                "read it on the GPU (cupy.from_dlpack(tensor), torch.from_dlpack(tensor))"
            )
        return span.host
