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

Lifetimes: a tensor keeps its producer (buffer, mapping) alive; a sub-tensor keeps its
parent alive; numpy views and DLPack capsules keep the bytes alive even after
:meth:`NpuTensor.close`. No constructor or accessor here copies tensor bytes.
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
    ReadOnly,
    TensorDirection,
    TensorError,
    TensorType,
)
from . import _device as _device
from . import _dlpack as dlpack
from . import _dmabuf as dmabuf
from ._device import DeviceMemory
from ._host import HostMemory


class NpuTensor:
    """A view of ``info`` over a buffer of ``memory_type``; wraps, never copies.

    It owns nothing it was given (the constructor's buffer or fd stays the caller's), and
    owns what it was handed for good: runner-allocated XRT_BO memory and the fd of
    ``from_fd(..., take_ownership=True)``, released by :meth:`close` or when collected.

    Raises :class:`~copyless.TensorError` (a ``ValueError``) when the buffer is missing, too
    small, read-only for an OUTPUT tensor, not contiguous or an unmappable fd, and
    :class:`~copyless.MemoryTypeError` when a HW view is put on pageable memory. Every
    message names the tensor and the numbers involved.
    """

    __slots__ = (
        "__weakref__",
        "_buffer",
        "_bytes",
        "_device",
        "_export_fd",
        "_finalizer",
        "_info",
        "_memory",
        "_memory_type",
        "_offset",
        "_parent",
        "_produced_shape",
    )

    def __init__(self, info: NpuTensorInfo, buffer: Any, memory_type: MemoryType) -> None:
        self._setup(info, buffer, memory_type, own_fd=False)

    def _setup(
        self, info: NpuTensorInfo, buffer: Any, memory_type: MemoryType, *, own_fd: bool
    ) -> None:
        _check_header(info, buffer, memory_type)
        self._info = info
        self._memory_type = memory_type
        self._buffer = buffer
        self._parent: NpuTensor | None = None
        self._offset = 0
        self._memory: HostMemory | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._export_fd = -1
        self._bytes: npt.NDArray[np.uint8] | None = None
        self._produced_shape: tuple[int, ...] | None = None
        self._device: DeviceMemory | None = None
        if memory_type is not MemoryType.DMA_FD and _device.is_device_producer(buffer):
            self._device = _device_memory(info, buffer, memory_type)
            return
        if memory_type is MemoryType.DMA_FD:
            try:
                # Private mapping plus a private dup (or the fd itself when owned).
                memory = HostMemory.from_fd(
                    buffer, info.size_in_bytes, own_fd=own_fd, dup=not own_fd
                )
            except TensorError as exc:
                raise TensorError(f"tensor {info.name!r}: {exc}") from exc
            self._memory = memory
            self._finalizer = weakref.finalize(self, memory.close)
            self._export_fd = memory.fd
            data = memory.array
        elif memory_type is MemoryType.XRT_BO:
            if not isinstance(buffer, HostMemory) or buffer.fd < 0:
                raise MemoryTypeError(
                    f"tensor {info.name!r}: XRT_BO tensors come from Runner.allocate_npu_tensor "
                    "or wrap fd-backed HostMemory.shared(); use DMA_FD for other fds"
                )
            self._memory = buffer
            data = _host_bytes(info, buffer)
        else:
            data = _host_bytes(info, buffer)
        _check_size(info, data.nbytes)
        self._bytes = data

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
        if not isinstance(array, np.ndarray):
            raise TensorError(
                f"tensor {name!r}: expected a numpy array, got {type(array).__name__}"
            )
        try:
            data_type = DataType.from_numpy(array.dtype)
        except ValueError as exc:
            raise TensorError(f"tensor {name!r}: {exc}") from None
        layout = memory_layout or _default_layout(array.ndim)
        info = NpuTensorInfo(name, data_type, direction, tensor_type, layout, tuple(array.shape))
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
        must lie inside this tensor's bytes (no copy).
        """
        if self._device is not None:
            return self._device_sub_tensor(self._device, info, offset)
        parent_bytes = self._live_bytes()
        _check_header(info, self._buffer, self._memory_type)
        if self._parent is not None:
            raise TensorError(
                f"sub-tensor {info.name!r}: {self._info.name!r} is itself a sub-tensor "
                "(one nesting level)"
            )
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise TensorError(
                f"sub-tensor {info.name!r}: offset must be an int >= 0, got {offset!r}"
            )
        itemsize = info.data_type.itemsize
        if offset % itemsize:
            raise TensorError(
                f"sub-tensor {info.name!r}: offset {offset} is not a multiple of the "
                f"{itemsize}-byte {info.data_type.name} element"
            )
        end = offset + info.size_in_bytes
        if info.direction is TensorDirection.OUTPUT and not parent_bytes.flags.writeable:
            raise TensorError(
                f"sub-tensor {info.name!r}: an OUTPUT tensor needs writable memory, and "
                f"{self._info.name!r} wraps a read-only buffer"
            )
        if end > parent_bytes.nbytes:
            raise TensorError(
                f"sub-tensor {info.name!r}: bytes [{offset}, {end}) exceed the parent "
                f"{self._info.name!r} of {parent_bytes.nbytes} bytes"
            )
        sub = object.__new__(NpuTensor)
        sub._info = info
        sub._memory_type = self._memory_type
        sub._buffer = self._buffer
        sub._bytes = parent_bytes[offset:end]
        sub._device = None
        sub._parent = self  # the parent (and the memory it owns) lives while sub does
        sub._offset = offset
        sub._memory = self._memory
        sub._finalizer = None
        sub._export_fd = self._export_fd
        sub._produced_shape = None
        return sub

    def _device_sub_tensor(
        self, parent: DeviceMemory, info: NpuTensorInfo, offset: int
    ) -> NpuTensor:
        """A sub-tensor of device memory: the same checks, the pointer moved (no copy)."""
        _check_header(info, self._buffer, self._memory_type)
        if self._parent is not None:
            raise TensorError(f"sub-tensor {info.name!r}: one nesting level")
        itemsize = info.data_type.itemsize
        bad = isinstance(offset, bool) or not isinstance(offset, int) or offset < 0
        if bad or offset % itemsize or offset + info.size_in_bytes > parent.nbytes:
            raise TensorError(
                f"sub-tensor {info.name!r}: offset {offset!r} is not an element-aligned "
                f"offset with {info.size_in_bytes} bytes inside the {parent.nbytes} bytes "
                f"of {self._info.name!r}"
            )
        sub = NpuTensor(info, parent.view(offset, info.size_in_bytes), self._memory_type)
        sub._parent = self
        sub._offset = offset
        return sub

    # -- the VART-ML accessors ----------------------------------------------------------
    info = ReadOnly[NpuTensorInfo]("The tensor's metadata (shape, dtype, layout, view).")
    memory_type = ReadOnly[MemoryType]("Where the bytes live (see :class:`MemoryType`).")
    parent = ReadOnly["NpuTensor | None"]("The tensor this is a sub-tensor of, or None.")
    offset = ReadOnly[int]("Byte offset into the parent's buffer (0 for no sub-tensor).")

    @property
    def produced_shape(self) -> tuple[int, ...] | None:
        """For an output whose shape depends on the data: the shape the last job that wrote
        this tensor produced (set when the job ends: before its callback runs). The result
        sits C-contiguously at the start of the buffer; when it did not fit (the job ended
        with INVALID_OUTPUT) this is the shape needed. None otherwise."""
        return self._produced_shape

    @property
    def closed(self) -> bool:
        return self._bytes is None and self._device is None

    @property
    def device(self) -> str:
        """Where the bytes are: ``"cpu"`` (host memory) or ``"cuda:N"``."""
        return "cpu" if self._device is None else self._device.device

    @property
    def device_memory(self) -> DeviceMemory | None:
        """The device memory this tensor wraps (pointer, producer stream...); None on host."""
        return self._device

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer this tensor covers (at least ``info.size_in_bytes``); 0 closed."""
        if self._device is not None:
            return self._device.nbytes
        return 0 if self._bytes is None else int(self._bytes.nbytes)

    @property
    def address(self) -> int:
        """Address of the first byte, for every memory type (the engine binds this): a
        device pointer for device memory. Raises :class:`TensorError` after :meth:`close`.
        """
        if self._device is not None:
            return self._device.ptr
        return int(self._live_bytes().__array_interface__["data"][0])

    def get_info(self) -> NpuTensorInfo:
        return self._info

    def get_memory_type(self) -> MemoryType:
        return self._memory_type

    def get_buffer(self) -> Any:
        """The wrapped object: the fd for DMA_FD, the HostMemory for XRT_BO; None if closed."""
        return None if self.closed else self._buffer

    def get_virtual_address(self) -> int:
        """The address of the data (the device pointer for device memory); 0 for DMA_FD or
        a closed tensor (never raises)."""
        if self._device is not None:
            return self._device.ptr
        if self._memory_type is MemoryType.DMA_FD or self._bytes is None:
            return 0
        return int(self._bytes.__array_interface__["data"][0])

    def numpy(self) -> npt.NDArray[Any]:
        """A numpy array of ``info.shape``/``info.data_type`` sharing this tensor's memory.

        No copy; the array keeps the memory alive on its own. Raises after :meth:`close`.
        """
        info = self._info
        raw = self._live_bytes()[: info.size_in_bytes]
        if info.strides is None:
            packed: npt.NDArray[Any] = raw.view(info.numpy_dtype).reshape(info.shape)
            return packed
        array: npt.NDArray[Any] = np.ndarray(
            info.shape, dtype=info.numpy_dtype, buffer=raw, strides=info.strides
        )
        return array

    def bytes_view(self) -> npt.NDArray[np.uint8]:
        """Flat uint8 view of the bytes this tensor covers (no copy). Raises after close."""
        return self._live_bytes()

    @property
    def needs_sync(self) -> bool:
        """Whether :meth:`sync_buffer` does work: a DMA_FD tensor over a dma-buf, whose
        exporter may need the CPU caches flushed or invalidated (see :mod:`._dmabuf`)."""
        memory = self._memory
        return memory is not None and memory.is_dmabuf and self._bytes is not None

    def sync_buffer(self) -> None:
        """Flush (INPUT) / invalidate (OUTPUT) for device access.

        On a dma-buf this is the kernel's ``DMA_BUF_IOCTL_SYNC`` (the runner calls it around
        each job unless ``skip_in_bo_sync`` / ``skip_out_bo_sync``; then the application
        does). Host memory, memfds and locked memory are cache-coherent with every engine
        copyless drives on the CPU, so it is a no-op there; it is always safe to call.
        Raises TensorError when the kernel refuses the sync.
        """
        memory = self._memory
        if memory is None or not memory.is_dmabuf or self._bytes is None:
            return
        try:
            dmabuf.sync(memory.fd, device_reads=self._info.direction is TensorDirection.INPUT)
        except OSError as exc:
            raise TensorError(f"tensor {self._info.name!r}: dma-buf sync failed: {exc}") from exc

    def export_buffer(self) -> int:
        """A NEW fd of this tensor's memory that the caller owns (XRT_BO, DMA_FD); else -1.

        For a sub-tensor the fd is the parent's whole buffer; :attr:`offset` says where the
        sub-tensor starts. -1 too after :meth:`close` or when ``dup`` fails (never raises).
        """
        if self._bytes is None:
            return -1
        try:
            if self._memory_type is MemoryType.XRT_BO and self._memory is not None:
                return self._memory.export_fd()
            if self._memory_type is MemoryType.DMA_FD and self._export_fd >= 0:
                return os.dup(self._export_fd)
        except OSError:
            return -1
        return -1

    def close(self) -> None:
        """Drop this tensor's hold on its memory now (idempotent).

        Memory the tensor owns (runner-allocated XRT_BO, a DMA_FD mapping and its private
        fd) is released: descriptors at once, pages when the last numpy view goes. A
        sub-tensor only lets go of its parent. Accessors then return their sentinels and
        ``numpy()`` raises.
        """
        self._bytes = None
        self._device = None
        self._buffer = None
        self._parent = None
        self._memory = None
        self._export_fd = -1
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
        if self._device is not None:
            array = _device.as_cupy(self._device, self._info.shape, self._info.data_type)
            return array.__dlpack__(stream=stream, **kwargs)
        return dlpack.to_dlpack(self.numpy(), self, stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._device is not None:
            return (_device.DLPACK_CUDA, self._device.device_id)
        return (dlpack.DEVICE_CPU, 0)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The interface CuPy, PyTorch and Numba read (device memory only: host tensors
        raise ``AttributeError``, so ``hasattr`` tells them apart)."""
        if self._device is None:
            raise AttributeError("a host-memory NpuTensor has no __cuda_array_interface__")
        return _device.cuda_array_interface(self._device, self._info.shape, self._info.data_type)

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        where = "" if self._device is None else f" on {self._device.device}"
        return f"<NpuTensor {self._info.describe()} {self._memory_type.name}{where}{state}>"

    def _live_bytes(self) -> npt.NDArray[np.uint8]:
        if self._bytes is None:
            if self._device is not None:
                raise TensorError(
                    f"tensor {self._info.name!r} is device memory ({self._device.device}): "
                    "read it on the GPU (cupy.from_dlpack(tensor), torch.from_dlpack(tensor))"
                )
            raise TensorError(f"tensor {self._info.name!r} is closed")
        return self._bytes


def _check_header(info: Any, buffer: Any, memory_type: Any) -> None:
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


def check_bounded(info: NpuTensorInfo) -> None:
    """TensorError for an info with -1 dims (data-dependent, no bound known)."""
    if not info.bounded:
        raise TensorError(
            f"tensor {info.name!r}: shape {list(info.shape)} has data-dependent dims with no "
            "known bound (-1); replace them with the capacity you want, e.g. "
            "dataclasses.replace(info, shape=(...))"
        )


def _device_memory(info: NpuTensorInfo, buffer: Any, memory_type: MemoryType) -> DeviceMemory:
    """``buffer``'s device memory checked for ``info`` (no copy)."""
    if memory_type is MemoryType.USER_POINTER_NON_CMA:
        raise MemoryTypeError(
            f"tensor {info.name!r}: device memory is USER_POINTER_CMA (the device reads it "
            "directly), not USER_POINTER_NON_CMA"
        )
    memory = _device.wrap_device(buffer, info.name)
    if memory.readonly and info.direction is TensorDirection.OUTPUT:
        raise TensorError(
            f"tensor {info.name!r}: the device buffer is read-only, and an OUTPUT tensor is "
            "written by the engine"
        )
    _check_size(info, memory.nbytes)
    return memory


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
