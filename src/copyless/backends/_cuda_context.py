"""The per-slot binding state of a CUDA engine (see :mod:`copyless.backends.cuda`)."""

from __future__ import annotations

import math
import weakref

import onnxruntime as ort

from ..model.graph import ELEM_OF
from ..types import DataType, UnsupportedError
from ._cuda_driver import CudaDriver
from .onnxruntime import OrtContext

# A staged tensor: (host address, device buffer, bytes).
_Staged = tuple[int, int, int]


class CudaContext(OrtContext):
    """An IOBinding on the GPU plus the staging buffers of host-memory tensors.

    The ONNX Runtime context with ``device="cuda"``: outputs whose shape depends on the data
    are allocated by ONNX Runtime on the GPU and :meth:`run` copies the produced bytes into
    the caller's memory (device -> host, or device -> device for device memory: a copy)."""

    __slots__ = ("__weakref__", "_buffers", "_downloads", "_driver", "_finalizer", "_stream",
                 "_uploads", "_waits")  # fmt: skip

    def __init__(
        self, session: ort.InferenceSession, drv: CudaDriver, device_id: int, stream: int
    ) -> None:
        super().__init__(session, "cuda", device_id)
        self._driver = drv
        self._stream = stream
        self._uploads: dict[str, _Staged] = {}
        self._downloads: dict[str, _Staged] = {}
        self._buffers: dict[str, tuple[int, int]] = {}  # name -> (device ptr, capacity)
        self._waits: list[int] = []
        self._finalizer = weakref.finalize(self, _free_buffers, drv, device_id, self._buffers)

    @property
    def stream(self) -> int:
        return self._stream

    @property
    def staged(self) -> tuple[str, ...]:
        """Names of the tensors bound from host memory (copied each run)."""
        return (*self._uploads, *self._downloads)

    def bind_input(
        self, name: str, address: int, data_type: DataType, shape: tuple[int, ...]
    ) -> None:
        """Bind ``address``: in place when it is device memory, else staged (H2D each run)."""
        self._bind(name, address, data_type, shape, output=False, allow_host=True)

    def bind_output(
        self, name: str, address: int, data_type: DataType, shape: tuple[int, ...]
    ) -> None:
        """Bind ``address``: in place when it is device memory, else staged (D2H each run)."""
        self._bind(name, address, data_type, shape, output=True, allow_host=True)

    def bind_output_dynamic(
        self, name: str, address: int, data_type: DataType, capacity: tuple[int, ...]
    ) -> None:
        self._driver.use(self._device_id)
        owner = self._driver.device_of(address)
        if owner is not None and owner != self._device_id:
            raise UnsupportedError(
                f"{name!r}: memory on cuda:{owner} cannot take an output of cuda:{self._device_id}"
            )
        self._downloads.pop(name, None)
        super().bind_output_dynamic(name, address, data_type, capacity)

    def _copy_out(self, address: int, source: int, nbytes: int) -> None:
        if self._driver.device_of(address) is None:
            self._driver.copy_dtoh(address, source, nbytes, self._stream)
        else:
            self._driver.copy_dtod(address, source, nbytes, self._stream)
        self._driver.synchronize(self._stream)

    def bind_device(
        self,
        name: str,
        address: int,
        data_type: DataType,
        shape: tuple[int, ...],
        *,
        output: bool,
    ) -> None:
        """Bind device memory in place; host memory raises :class:`UnsupportedError`."""
        self._bind(name, address, data_type, shape, output=output, allow_host=False)

    def _bind(
        self,
        name: str,
        address: int,
        data_type: DataType,
        shape: tuple[int, ...],
        *,
        output: bool,
        allow_host: bool,
    ) -> None:
        if output:
            self._fixed_output(name)
        key = (address, shape)
        if self._bound.get(name) == key:
            return
        self._driver.use(self._device_id)
        nbytes = math.prod(shape) * data_type.itemsize
        self._uploads.pop(name, None)
        self._downloads.pop(name, None)
        owner = self._driver.device_of(address)
        if owner is None:
            if not allow_host:
                raise UnsupportedError(f"{name!r}: {address:#x} is host memory, not device memory")
            staged = (address, self._buffer(name, nbytes), nbytes)
            (self._downloads if output else self._uploads)[name] = staged
            ptr = staged[1]
        elif owner != self._device_id:
            raise UnsupportedError(
                f"{name!r}: memory on cuda:{owner} cannot feed an engine on cuda:{self._device_id}"
            )
        else:
            ptr = address
        bind = self._binding.bind_output if output else self._binding.bind_input
        bind(name, self._device, self._device_id, ELEM_OF[data_type], list(shape), ptr)
        self._bound[name] = key

    def _buffer(self, name: str, nbytes: int) -> int:
        ptr, capacity = self._buffers.get(name, (0, 0))
        if capacity < nbytes:
            if ptr:
                self._driver.synchronize(self._stream)  # a run may still read it
                self._driver.free(ptr)
            ptr, capacity = self._driver.alloc(nbytes), nbytes
            self._buffers[name] = (ptr, capacity)
        return ptr

    def order_after(self, producer_stream: int) -> None:
        """Before the next run, make the engine's stream wait for work queued on
        ``producer_stream`` so far (an event; the host does not wait)."""
        self._waits.append(producer_stream)

    def run(self) -> None:
        """Uploads, the graph and downloads, in that order on the engine's stream.

        Returns when outputs (device and staged host ones) are complete."""
        drv, stream = self._driver, self._stream
        drv.use(self._device_id)
        while self._waits:
            drv.order(stream, self._waits.pop())
        for host, device, nbytes in self._uploads.values():
            drv.copy_htod(device, host, nbytes, stream)
        super().run()
        if self._downloads:
            for host, device, nbytes in self._downloads.values():
                drv.copy_dtoh(host, device, nbytes, stream)
            drv.synchronize(stream)

    def close(self) -> None:
        super().close()
        self._uploads.clear()
        self._downloads.clear()
        self._finalizer()


def _free_buffers(drv: CudaDriver, device_id: int, buffers: dict[str, tuple[int, int]]) -> None:
    if not buffers:
        return
    drv.use(device_id)
    for ptr, _capacity in buffers.values():
        drv.free(ptr)  # cuMemFree waits for work using the buffer to finish
    buffers.clear()
