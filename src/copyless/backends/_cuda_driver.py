"""A minimal ctypes binding of the CUDA driver API (``libcuda.so.1``).

What the CUDA backend needs beyond ONNX Runtime: streams and events (ordering a producer's
writes before the engine reads), pointer queries (is an address device or host memory?),
device memory for staging, and async copies. The driver library ships with the NVIDIA
driver itself, so this needs no CUDA toolkit, CuPy or PyTorch.

Every call runs in the device's *primary* context, the one the CUDA runtime (ONNX Runtime,
CuPy, PyTorch) uses, so pointers and streams are shared with them. The context is made
current on the calling thread first: CUDA contexts are per thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from typing import Any

from ..types import CopylessError, OutOfMemoryError, UnsupportedError

logger = logging.getLogger(__name__)

_OUT_OF_MEMORY = 2
_INVALID_VALUE = 1
_STREAM_NON_BLOCKING = 1
_EVENT_DISABLE_TIMING = 2
_ATTR_MEMORY_TYPE = 2
_ATTR_IS_MANAGED = 8
_ATTR_DEVICE_ORDINAL = 9
_MEMORYTYPE_HOST = 1

_void_p = ctypes.c_void_p
_size_t = ctypes.c_size_t
_uint = ctypes.c_uint
_u64 = ctypes.c_uint64  # CUdeviceptr

# name -> argtypes (every function returns CUresult, an int).
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cuInit": (_uint,),
    "cuDeviceGetCount": (ctypes.POINTER(ctypes.c_int),),
    "cuDeviceGet": (ctypes.POINTER(ctypes.c_int), ctypes.c_int),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(_void_p), ctypes.c_int),
    "cuCtxSetCurrent": (_void_p,),
    "cuStreamCreate": (ctypes.POINTER(_void_p), _uint),
    "cuStreamDestroy_v2": (_void_p,),
    "cuStreamSynchronize": (_void_p,),
    "cuStreamWaitEvent": (_void_p, _void_p, _uint),
    "cuEventCreate": (ctypes.POINTER(_void_p), _uint),
    "cuEventRecord": (_void_p, _void_p),
    "cuEventDestroy_v2": (_void_p,),
    "cuMemAlloc_v2": (ctypes.POINTER(_u64), _size_t),
    "cuMemFree_v2": (_u64,),
    "cuMemcpyHtoDAsync_v2": (_u64, _void_p, _size_t, _void_p),
    "cuMemcpyDtoHAsync_v2": (_void_p, _u64, _size_t, _void_p),
    "cuMemcpyDtoDAsync_v2": (_u64, _u64, _size_t, _void_p),
    "cuPointerGetAttribute": (_void_p, ctypes.c_int, _u64),
    "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
}

_lock = threading.Lock()
_driver: CudaDriver | None = None


def driver() -> CudaDriver:
    """The process-wide driver; raises :class:`UnsupportedError` with the reason when there
    is no driver library or no device."""
    global _driver
    with _lock:
        if _driver is None:
            _driver = CudaDriver(_load_library())
        return _driver


def _load_library() -> Any:
    names = ["libcuda.so.1", ctypes.util.find_library("cuda") or "libcuda.so"]
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise UnsupportedError(
        "no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded): "
        "the CUDA backend needs an NVIDIA GPU and its driver"
    )


class CudaDriver:
    """Bound driver entry points plus the primary context of each device used."""

    def __init__(self, lib: Any) -> None:
        self._fns: dict[str, Any] = {}
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes = list(argtypes)
            fn.restype = ctypes.c_int
            self._fns[name] = fn
        code = self._fns["cuInit"](0)
        if code != 0:
            raise UnsupportedError(f"the CUDA driver failed to initialise: {self._name(code)}")
        count = ctypes.c_int(0)
        self._call("cuDeviceGetCount", ctypes.byref(count))
        self.device_count = count.value
        self._contexts: dict[int, int] = {}
        self._streams: dict[int, int] = {}

    # -- errors -------------------------------------------------------------------------
    def _name(self, code: int) -> str:
        text = ctypes.c_char_p()
        if self._fns["cuGetErrorName"](code, ctypes.byref(text)) == 0 and text.value:
            return f"{text.value.decode()} ({code})"
        return f"CUresult {code}"

    def _call(self, name: str, *args: Any) -> None:
        code = self._fns[name](*args)
        if code == _OUT_OF_MEMORY:
            raise OutOfMemoryError(int(args[-1]) if name == "cuMemAlloc_v2" else 0, name)
        if code != 0:
            raise CopylessError(f"CUDA {name} failed: {self._name(code)}")

    # -- contexts -----------------------------------------------------------------------
    def use(self, device_id: int) -> None:
        """Make ``device_id``'s primary context current on this thread (retained once)."""
        if not 0 <= device_id < self.device_count:
            raise UnsupportedError(
                f"CUDA device {device_id} does not exist ({self.device_count} device(s))"
            )
        context = self._contexts.get(device_id)
        if context is None:
            device = ctypes.c_int(0)
            self._call("cuDeviceGet", ctypes.byref(device), device_id)
            handle = _void_p()
            self._call("cuDevicePrimaryCtxRetain", ctypes.byref(handle), device)
            # Retained for the process's life, as the CUDA runtime does.
            context = self._contexts.setdefault(device_id, int(handle.value or 0))
        self._call("cuCtxSetCurrent", _void_p(context))

    # -- streams and events -------------------------------------------------------------
    def create_stream(self) -> int:
        """A non-blocking stream (it does not serialise with the legacy default stream)."""
        handle = _void_p()
        self._call("cuStreamCreate", ctypes.byref(handle), _STREAM_NON_BLOCKING)
        return int(handle.value or 0)

    def shared_stream(self, device_id: int) -> int:
        """copyless's stream on ``device_id``: created once, used by every engine that was
        given no stream of its own, and kept for the process's life (an ONNX Runtime
        session may use its stream until its very last release, which Python does not
        order against ours; the driver frees it at exit)."""
        with _lock:
            stream = self._streams.get(device_id)
            if stream is None:
                self.use(device_id)
                stream = self._streams.setdefault(device_id, self.create_stream())
        return stream

    def destroy_stream(self, stream: int) -> None:
        self._call("cuStreamDestroy_v2", _void_p(stream))

    def synchronize(self, stream: int) -> None:
        self._call("cuStreamSynchronize", _void_p(stream))

    def order(self, consumer: int, producer: int) -> None:
        """Make ``consumer`` wait for the work queued on ``producer`` so far (no host wait).

        An event is recorded on ``producer`` and ``consumer`` waits on it; destroying the
        event right away is allowed (the driver frees it once it has completed).
        """
        if consumer == producer:
            return
        event = _void_p()
        self._call("cuEventCreate", ctypes.byref(event), _EVENT_DISABLE_TIMING)
        try:
            self._call("cuEventRecord", event, _void_p(producer))
            self._call("cuStreamWaitEvent", _void_p(consumer), event, 0)
        finally:
            self._call("cuEventDestroy_v2", event)

    # -- memory -------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        ptr = _u64(0)
        self._call("cuMemAlloc_v2", ctypes.byref(ptr), _size_t(max(1, nbytes)))
        return int(ptr.value)

    def free(self, ptr: int) -> None:
        self._call("cuMemFree_v2", _u64(ptr))

    def copy_htod(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call(
            "cuMemcpyHtoDAsync_v2", _u64(dst), _void_p(src), _size_t(nbytes), _void_p(stream)
        )

    def copy_dtoh(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call(
            "cuMemcpyDtoHAsync_v2", _void_p(dst), _u64(src), _size_t(nbytes), _void_p(stream)
        )

    def copy_dtod(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call("cuMemcpyDtoDAsync_v2", _u64(dst), _u64(src), _size_t(nbytes), _void_p(stream))

    def device_of(self, ptr: int) -> int | None:
        """The device ordinal when ``ptr`` is device (or managed) memory; None for host memory
        (pageable, pinned or registered), which the backend stages with explicit copies."""
        kind = _uint(0)
        code = self._fns["cuPointerGetAttribute"](ctypes.byref(kind), _ATTR_MEMORY_TYPE, _u64(ptr))
        if code == _INVALID_VALUE:
            return None  # memory CUDA never heard of: pageable host memory
        if code != 0:
            raise CopylessError(f"CUDA cuPointerGetAttribute failed: {self._name(code)}")
        managed = _uint(0)
        self._call("cuPointerGetAttribute", ctypes.byref(managed), _ATTR_IS_MANAGED, _u64(ptr))
        if kind.value == _MEMORYTYPE_HOST and not managed.value:
            return None
        ordinal = ctypes.c_int(0)
        self._call("cuPointerGetAttribute", ctypes.byref(ordinal), _ATTR_DEVICE_ORDINAL, _u64(ptr))
        return int(ordinal.value)

