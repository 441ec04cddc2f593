"""Device (GPU) memory: wrap other libraries' buffers without a copy, and export ours.

:class:`DeviceArray` is a typed view of device memory that keeps its owner alive (CuPy's
``UnownedMemory`` idea): a CuPy/PyTorch array, an ``OrtValue``, a consumed DLPack capsule, or
nothing for a raw pointer the caller keeps alive. Nothing here copies tensor bytes and nothing
here calls CUDA: ordering work between streams is the backend's job (``backends/cuda.py``).

Producers accepted by :func:`as_device_array`, in this order of preference:

* a :class:`DeviceArray` (ours);
* ``__dlpack__``/``__dlpack_device__`` on a CUDA device (CuPy, PyTorch, JAX, ``OrtValue``);
* ``__cuda_array_interface__`` (CuPy, PyTorch, Numba);
* an ``int`` device pointer (trusted: its size cannot be checked).

Stream rule, consumer side (we read what a producer wrote):

* DLPack: we call ``producer.__dlpack__(stream=S)`` with ``S`` our compute stream, so the
  *producer* makes ``S`` wait for its pending writes (the DLPack contract). ``S = 0`` (the
  legacy default stream) travels as ``1``, since DLPack reserves 0.
* ``__cuda_array_interface__`` v3: a non-None ``"stream"`` entry is the stream the producer
  wrote on; it lands in :attr:`DeviceArray.stream` and the backend makes its own stream wait
  on it (an event) before the engine reads the memory.
* raw pointers: the caller names the producer stream (``stream=``) or guarantees the data is
  complete (written on the engine's stream, or synchronized).

Producer side: our own buffers are complete when the call that wrote them returns (ONNX
Runtime synchronizes its stream at the end of ``Run``; the copy helpers synchronize), so
:attr:`DeviceArray.stream` is ``None`` for them and ``__dlpack__`` needs no ordering.
"""

from __future__ import annotations

import ctypes
import math
import weakref
from typing import Any

import numpy as np

from ..types import DataType, NpuTensorInfo, TensorError, UnsupportedError

DLPACK_CPU = 1
DLPACK_CUDA = 2
DLPACK_CUDA_HOST = 3
DLPACK_CUDA_MANAGED = 13
_CUDA_DEVICES = (DLPACK_CUDA, DLPACK_CUDA_MANAGED)

# DLDataType (code, bits) per DataType; lanes are always 1.
_DL_CODES: dict[DataType, tuple[int, int]] = {
    DataType.BOOLEAN: (6, 8),
    DataType.INT8: (0, 8),
    DataType.UINT8: (1, 8),
    DataType.INT16: (0, 16),
    DataType.UINT16: (1, 16),
    DataType.BF16: (4, 16),
    DataType.FP16: (2, 16),
    DataType.INT32: (0, 32),
    DataType.UINT32: (1, 32),
    DataType.FLOAT32: (2, 32),
    DataType.INT64: (0, 64),
    DataType.UINT64: (1, 64),
}
_FROM_DL = {code: dt for dt, code in _DL_CODES.items()}


# -- the DLPack C ABI (dlpack.h v0.8 / v1.x) ---------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_READ_ONLY_FLAG = 1
# Capsule names must outlive their capsules (CPython stores the pointer): module constants.
_LEGACY, _LEGACY_USED = b"dltensor", b"used_dltensor"
_VERSIONED, _VERSIONED_USED = b"dltensor_versioned", b"used_dltensor_versioned"
_api = ctypes.pythonapi
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _api)
)
_new_capsule = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", _api))
# The destructor gets a dying capsule: raw pointers only, never a new reference to it.
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)
_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)

#: Exported capsules alive (not yet deleted by their consumer): struct address -> keep-alives.
_EXPORTS: dict[int, tuple[Any, ...]] = {}


def _release_export(managed: int | None) -> None:
    # The consumer is done with an exported tensor: drop what kept it alive.
    if managed:
        _EXPORTS.pop(managed, None)


def _destroy_capsule(capsule: int | None) -> None:
    # A capsule nobody consumed still owns its tensor; a consumed one was renamed.
    for name in (_LEGACY, _VERSIONED):
        if capsule and _raw_is_valid(capsule, name):
            _release_export(_raw_get_pointer(capsule, name))


# C entry points (CFUNCTYPE takes the GIL when a consumer calls from another thread).
_EXPORT_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_release_export)
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_destroy_capsule)


def export_dlpack(
    ptr: int,
    shape: tuple[int, ...],
    data_type: DataType,
    device: tuple[int, int],
    owner: object,
    *,
    max_version: tuple[int, int] | None = None,
    readonly: bool = False,
) -> Any:
    """A DLPack capsule over ``ptr`` (no copy); ``owner`` lives until the consumer calls the
    deleter (or the capsule dies unconsumed).

    A consumer that asks for ``max_version >= (1, 0)`` gets a ``"dltensor_versioned"``
    capsule (with the read-only flag); others the legacy ``"dltensor"``.
    """
    code, bits = _DL_CODES[data_type]
    dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    versioned = max_version is not None and max_version[0] >= 1
    managed: _DLManagedTensor | _DLManagedTensorVersioned
    if versioned:
        managed = _DLManagedTensorVersioned(major=1, minor=0)
        managed.flags = _READ_ONLY_FLAG if readonly else 0
    else:
        managed = _DLManagedTensor()
    tensor = managed.dl_tensor
    tensor.data = ptr
    tensor.device = _DLDevice(device[0], device[1])
    tensor.ndim = len(shape)
    tensor.dtype = _DLDataType(code, bits, 1)
    tensor.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = None  # packed C order
    managed.deleter = ctypes.cast(_EXPORT_DELETER, ctypes.c_void_p).value
    address = ctypes.addressof(managed)
    _EXPORTS[address] = (managed, dims, owner)
    destructor = ctypes.cast(_CAPSULE_DESTRUCTOR, ctypes.c_void_p).value
    return _new_capsule(address, _VERSIONED if versioned else _LEGACY, destructor)


class _ImportedTensor:
    """A consumed DLPack capsule: calls the producer's deleter when released."""

    __slots__ = ("__weakref__", "finalizer")

    def __init__(self, managed: int, deleter: int | None) -> None:
        self.finalizer = weakref.finalize(self, _call_deleter, managed, deleter)


def _call_deleter(managed: int, deleter: int | None) -> None:
    if deleter:
        _DELETER(deleter)(managed)


def import_dlpack(
    capsule: Any,
) -> tuple[int, tuple[int, ...], DataType, tuple[int, int], bool, _ImportedTensor]:
    """Consume a DLPack capsule: ``(ptr, shape, data_type, device, readonly, owner)``.

    Raises :class:`TensorError` for a used or foreign capsule, a non-packed layout or an
    element type copyless has no DataType for. ``owner`` calls the producer's deleter.
    """
    if _is_valid(capsule, _VERSIONED):
        managed = _get_pointer(capsule, _VERSIONED)
        versioned = _DLManagedTensorVersioned.from_address(managed)
        if versioned.major < 1:
            raise TensorError(f"DLPack capsule of unknown version {versioned.major}")
        tensor, deleter = versioned.dl_tensor, versioned.deleter
        readonly = bool(versioned.flags & _READ_ONLY_FLAG)
        used = _VERSIONED_USED
    elif _is_valid(capsule, _LEGACY):
        managed = _get_pointer(capsule, _LEGACY)
        legacy = _DLManagedTensor.from_address(managed)
        tensor, deleter, readonly, used = legacy.dl_tensor, legacy.deleter, False, _LEGACY_USED
    else:
        raise TensorError("not an unconsumed DLPack capsule ('dltensor' or 'dltensor_versioned')")
    shape = tuple(int(tensor.shape[i]) for i in range(tensor.ndim))
    strides = None if not tensor.strides else [int(tensor.strides[i]) for i in range(tensor.ndim)]
    data_type = _FROM_DL.get((tensor.dtype.code, tensor.dtype.bits))
    # Validate everything before taking ownership: a refused capsule keeps its own deleter.
    if data_type is None or tensor.dtype.lanes != 1:
        raise TensorError(
            f"DLPack dtype (code {tensor.dtype.code}, {tensor.dtype.bits} bits, "
            f"{tensor.dtype.lanes} lanes) has no copyless DataType"
        )
    if strides is not None and not _packed(shape, strides):
        raise TensorError(f"DLPack tensor {list(shape)} has non-packed strides {strides}")
    _set_name(capsule, used)
    owner = _ImportedTensor(managed, deleter)
    ptr = int(tensor.data or 0) + int(tensor.byte_offset)
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    return ptr, shape, data_type, device, readonly, owner


def _packed(shape: tuple[int, ...], strides: list[int]) -> bool:
    step = 1
    for dim, stride in zip(reversed(shape), reversed(strides), strict=True):
        if dim != 1 and stride != step:
            return False
        step *= dim
    return True


def dlpack_stream_argument(stream: int | None) -> int | None:
    """The ``stream=`` value to hand a CUDA DLPack producer for consumer stream ``stream``.

    ``None`` stays ``None`` (the producer then orders against the legacy default stream);
    handle ``0`` (the legacy default stream) becomes ``1`` because DLPack reserves 0.
    """
    if stream is None:
        return None
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise TensorError(f"a CUDA stream is an int handle >= 0, got {stream!r}")
    return 1 if stream == 0 else stream


class DeviceArray:
    """A typed, packed view of device memory; keeps ``owner`` alive, never copies.

    ``stream`` is the producer stream the consumer must wait on before reading (from
    ``__cuda_array_interface__`` v3 or the caller), ``None`` when the data is complete.
    """

    __slots__ = (
        "__weakref__",
        "_data_type",
        "_device_id",
        "_owner",
        "_ptr",
        "_readonly",
        "_shape",
        "_stream",
    )

    def __init__(
        self,
        ptr: int,
        shape: tuple[int, ...],
        data_type: DataType,
        *,
        device_id: int = 0,
        owner: object = None,
        stream: int | None = None,
        readonly: bool = False,
    ) -> None:
        if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr <= 0:
            raise TensorError(f"a device pointer is a non-zero int, got {ptr!r}")
        if not isinstance(data_type, DataType) or data_type is DataType.UNKNOWN:
            raise TensorError(f"data_type must be a known DataType, got {data_type!r}")
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
            raise TensorError(f"shape must hold ints >= 0, got {shape!r}")
        if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
            raise TensorError(f"device_id must be an int >= 0, got {device_id!r}")
        dlpack_stream_argument(stream)  # validates the handle
        self._ptr, self._shape, self._data_type = ptr, tuple(shape), data_type
        self._device_id, self._owner, self._stream = device_id, owner, stream
        self._readonly = bool(readonly)

    # -- producers ----------------------------------------------------------------------
    @classmethod
    def from_dlpack(cls, producer: Any, *, stream: int | None) -> DeviceArray:
        """Import a CUDA DLPack producer, asking it to order its writes before ``stream``."""
        kind = int(producer.__dlpack_device__()[0])
        if kind not in _CUDA_DEVICES:
            raise TensorError(
                f"{type(producer).__name__} lives on DLPack device {kind}, not CUDA "
                f"({DLPACK_CUDA}) or CUDA managed ({DLPACK_CUDA_MANAGED}) memory"
            )
        capsule = producer.__dlpack__(stream=dlpack_stream_argument(stream))
        ptr, shape, data_type, device, readonly, owner = import_dlpack(capsule)
        if device[0] not in _CUDA_DEVICES:
            raise TensorError(f"{type(producer).__name__}'s capsule is on device {device}")
        return cls(ptr, shape, data_type, device_id=device[1], owner=owner, readonly=readonly)

    @classmethod
    def from_cuda_array_interface(cls, producer: Any, *, device_id: int = 0) -> DeviceArray:
        """Wrap ``producer.__cuda_array_interface__`` (v2/v3); keeps ``producer`` alive.

        The interface does not name the device: ``device_id`` says which one it is on.
        """
        cai = producer.__cuda_array_interface__
        if not isinstance(cai, dict) or not {"shape", "typestr", "data"} <= cai.keys():
            raise TensorError(f"{type(producer).__name__}: malformed __cuda_array_interface__")
        shape = tuple(int(d) for d in cai["shape"])
        ptr, readonly = cai["data"]
        try:
            data_type = DataType.from_numpy(np.dtype(cai["typestr"]))
        except (TypeError, ValueError) as exc:
            raise TensorError(f"{type(producer).__name__}: {exc}") from None
        strides = cai.get("strides")
        if strides is not None:
            in_elements = [int(s) // data_type.itemsize for s in strides]
            if any(int(s) % data_type.itemsize for s in strides) or not _packed(shape, in_elements):
                raise TensorError(f"{type(producer).__name__}: non-packed strides {strides}")
        if cai.get("mask") is not None:
            raise TensorError(f"{type(producer).__name__}: masked arrays are not supported")
        stream = cai.get("stream")
        if stream == 0:
            raise TensorError(f"{type(producer).__name__}: stream 0 is disallowed by the spec")
        if math.prod(shape) == 0:
            raise TensorError(f"{type(producer).__name__}: empty array {list(shape)}")
        return cls(
            int(ptr),
            shape,
            data_type,
            device_id=device_id,
            owner=producer,
            stream=stream,
            readonly=bool(readonly),
        )

    @classmethod
    def allocate(
        cls, shape: tuple[int, ...], data_type: DataType, device_id: int = 0
    ) -> DeviceArray:
        """New device memory (uninitialised) from CuPy's pool, else an ONNX Runtime
        ``OrtValue`` on ``cuda``. Raises :class:`UnsupportedError` when neither can."""
        nbytes = max(1, math.prod(shape) * data_type.itemsize)
        try:
            owner, ptr = _allocate_bytes(nbytes, device_id)
        except UnsupportedError:
            raise
        except Exception as exc:  # CuPy and onnxruntime raise their own types
            raise UnsupportedError(f"cannot allocate {nbytes} device bytes: {exc}") from exc
        return cls(ptr, shape, data_type, device_id=device_id, owner=owner)

    # -- attributes ---------------------------------------------------------------------
    @property
    def ptr(self) -> int:
        return self._ptr

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def data_type(self) -> DataType:
        return self._data_type

    @property
    def device_id(self) -> int:
        return self._device_id

    @property
    def nbytes(self) -> int:
        return math.prod(self._shape) * self._data_type.itemsize

    @property
    def stream(self) -> int | None:
        return self._stream

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def owner(self) -> object:
        return self._owner

    def check(self, info: NpuTensorInfo, *, writable: bool) -> None:
        """Raise :class:`TensorError` unless this array can be bound as ``info``."""
        if self._data_type is not info.data_type or self.nbytes != info.size_in_bytes:
            raise TensorError(
                f"tensor {info.name!r}: device array {self._data_type.name}{list(self._shape)} "
                f"({self.nbytes} bytes) does not match {info.describe()} "
                f"({info.size_in_bytes} bytes)"
            )
        if writable and self._readonly:
            raise TensorError(f"tensor {info.name!r}: the device array is read-only")

    # -- exports (no copy) --------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self._shape,
            "typestr": self._data_type.to_numpy().str,
            "data": (self._ptr, self._readonly),
            "strides": None,
            "version": 3,
            "stream": self._stream,
        }

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """A capsule over this memory; it keeps this array (and its owner) alive.

        Our data is complete (``stream is None``), so the consumer's ``stream`` needs no
        ordering. Raises ``BufferError`` while a producer stream is pending: only the
        backend can order that (or the consumer reads ``__cuda_array_interface__``).
        """
        max_version = kwargs.get("max_version")
        if kwargs.get("copy") is True:
            raise BufferError("DeviceArray exports without a copy only (copy=True refused)")
        if self._stream is not None and stream != -1:
            raise BufferError(
                f"device array still pending on producer stream {self._stream}: "
                "synchronize it or read __cuda_array_interface__"
            )
        return export_dlpack(
            self._ptr,
            self._shape,
            self._data_type,
            self.__dlpack_device__(),
            self,
            max_version=max_version,
            readonly=self._readonly,
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_CUDA, self._device_id)

    def __repr__(self) -> str:
        return (
            f"<DeviceArray {self._data_type.name}{list(self._shape)} at {self._ptr:#x} "
            f"on cuda:{self._device_id}>"
        )


def _allocate_bytes(nbytes: int, device_id: int) -> tuple[Any, int]:
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        with cupy.cuda.Device(device_id):
            array = cupy.empty((nbytes,), dtype=cupy.uint8)
        return array, int(array.data.ptr)
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise UnsupportedError(
            "cannot allocate device memory: neither CuPy nor onnxruntime's "
            "CUDAExecutionProvider is installed (pip install copyless[cuda])"
        )
    value = ort.OrtValue.ortvalue_from_shape_and_type([nbytes], np.uint8, "cuda", device_id)
    return value, int(value.data_ptr())


def as_device_array(obj: Any, *, stream: int | None, device_id: int = 0) -> DeviceArray:
    """Any supported producer as a :class:`DeviceArray` (no copy), per the stream rule.

    ``stream`` is the consumer's stream (DLPack) or, for an ``int`` pointer, the producer's
    stream to wait on. Raises :class:`TensorError` for host memory or unknown objects.
    """
    if isinstance(obj, DeviceArray):
        return obj
    if isinstance(obj, bool):
        raise TensorError("a device buffer cannot be a bool")
    if isinstance(obj, int):
        raise TensorError("an int pointer needs its shape and type: use device_pointer()")
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        kind = int(obj.__dlpack_device__()[0])
        if kind in _CUDA_DEVICES:
            return DeviceArray.from_dlpack(obj, stream=stream)
        if not hasattr(obj, "__cuda_array_interface__"):
            raise TensorError(
                f"{type(obj).__name__} is host memory (DLPack device {kind}): copy it with "
                "copy_input_to_gpu() or use run_inference()"
            )
    if hasattr(obj, "__cuda_array_interface__"):
        return DeviceArray.from_cuda_array_interface(obj, device_id=device_id)
    raise TensorError(
        f"{type(obj).__name__} is not device memory: pass a DeviceArray, a DLPack or "
        "__cuda_array_interface__ producer, or an int pointer"
    )


def device_pointer(
    ptr: int, info: NpuTensorInfo, *, device_id: int = 0, stream: int | None = None
) -> DeviceArray:
    """A raw device pointer taken as ``info`` (trusted to hold ``info.size_in_bytes``)."""
    return DeviceArray(ptr, info.shape, info.data_type, device_id=device_id, stream=stream)


def wrap_device(
    info: NpuTensorInfo, producer: Any, *, stream: int | None = None, device_id: int = 0
) -> DeviceArray:
    """The hook for a device ``NpuTensor``: ``producer`` checked against ``info``.

    ``producer`` is anything :func:`as_device_array` takes, or an ``int`` pointer.
    """
    if isinstance(producer, int) and not isinstance(producer, bool):
        return device_pointer(producer, info, device_id=device_id, stream=stream)
    array = as_device_array(producer, stream=stream, device_id=device_id)
    array.check(info, writable=False)
    return array
