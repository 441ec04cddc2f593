"""ONNX Runtime on NVIDIA GPUs: the CUDA (device "cuda") and TensorRT ("tensorrt") providers.

Never a silent CPU fallback: construction raises :class:`UnsupportedError` naming what is
missing (the provider in this onnxruntime build, the NVIDIA driver, the device), and a session
whose GPU provider failed to load (onnxruntime then quietly runs on the CPU) is refused too.

Binding (``IOBinding`` with ``device_type="cuda"``):

* device memory (an address the CUDA driver reports as device or managed memory on this GPU)
  is bound in place: zero-copy;
* host memory is *staged*: the context owns a device buffer per tensor and copies host ->
  device before each run and device -> host after it, on the engine's stream (explicit
  ``cuMemcpy*Async``; the only copies this backend makes). Pinned memory copies by DMA;
  pageable memory goes through the driver's bounce buffer.

Stream rule: each engine runs on one CUDA stream, given to both providers as
``user_compute_stream``: the ``stream`` option, else copyless's shared stream of the device
(one per device, kept for the process's life; engines of different runners then serialise
on it: pass your own streams to overlap them). Work queued on that stream before ``run``
(our uploads, or a producer's writes) is ordered before the engine's kernels. A producer
that wrote on another stream is ordered with :meth:`CudaContext.order_after` (an event
recorded on its stream, waited on by ours: no host wait). ONNX Runtime synchronizes the
stream at the end of ``Run``, so outputs are complete when ``run`` returns.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Mapping
from typing import Any

import onnxruntime as ort

from ..model import Partition
from ..types import OptionError, UnsupportedError
from ._cuda_context import CudaContext
from ._cuda_driver import CudaDriver, driver
from ._cuda_options import PROVIDERS, CudaOptions, parse_cuda_options, provider_list
from .onnxruntime import OrtEngine, create_session

logger = logging.getLogger(__name__)

__all__ = ["CudaBackend", "CudaContext", "CudaEngine", "CudaOptions", "check_available"]


def check_available(device: str) -> None:
    """Raise :class:`UnsupportedError` unless this onnxruntime build offers ``device``'s
    provider (checked before anything touches the GPU)."""
    provider = PROVIDERS.get(device)
    if provider is None:
        raise OptionError(
            f"device {device!r} is not a GPU device; expected one of {list(PROVIDERS)}"
        )
    available = ort.get_available_providers()
    if provider not in available:
        raise UnsupportedError(
            f"device {device!r} needs onnxruntime's {provider}, which this onnxruntime "
            f"{ort.__version__} build lacks (it offers {', '.join(available)}): "
            "pip install copyless[cuda] (onnxruntime-gpu replaces onnxruntime)"
        )


def _preload_cuda_libraries() -> None:
    """Let onnxruntime-gpu load CUDA/cuDNN from the ``nvidia-*`` wheels where installed
    (``ort.preload_dlls``, 1.21+); what it prints goes to the debug log, failures are logged."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        return
    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            preload()
    except (RuntimeError, OSError) as exc:  # the session then reports what is missing
        logger.warning("onnxruntime.preload_dlls failed: %s", exc)
    if text.getvalue().strip():
        logger.debug("onnxruntime.preload_dlls: %s", text.getvalue().strip())


class CudaBackend:
    """ONNX Runtime's CUDA or TensorRT provider on one GPU and one stream."""

    name = "onnxruntime"

    def __init__(
        self,
        options: Any = None,
        cuda_options: Mapping[str, Any] | CudaOptions | None = None,
    ) -> None:
        device = getattr(options, "device", "cuda") if options is not None else "cuda"
        if device not in PROVIDERS:
            raise OptionError(f"CudaBackend runs device 'cuda' or 'tensorrt', not {device!r}")
        self._options = parse_cuda_options(cuda_options)  # validate before any resource
        check_available(device)
        self._device = device
        self._driver = driver()
        self._driver.use(self._options.device_id)
        given = self._options.stream
        self._stream = given if given is not None else self._driver.shared_stream(self.device_id)
        _preload_cuda_libraries()

    @property
    def device(self) -> str:
        return self._device

    @property
    def device_id(self) -> int:
        return self._options.device_id

    @property
    def stream(self) -> int:
        """The CUDA stream handle every engine of this backend runs on."""
        return self._stream

    @property
    def driver(self) -> CudaDriver:
        """The CUDA driver binding (streams, copies) this backend uses."""
        return self._driver

    @property
    def options(self) -> CudaOptions:
        return self._options

    def load(self, partition: Partition, num_threads: int) -> CudaEngine:
        strict = {"session.disable_cpu_ep_fallback": "1"} if self._options.strict else None
        providers = provider_list(self._device, self._options, self._stream)
        session = create_session(partition, num_threads, providers, strict)
        wanted = PROVIDERS[self._device]
        if wanted not in session.get_providers():
            raise UnsupportedError(
                f"{partition.name}: onnxruntime could not enable {wanted} (it would run on "
                f"{session.get_providers()}): check the CUDA, cuDNN and TensorRT libraries "
                "onnxruntime-gpu needs; its log names the missing one"
            )
        return CudaEngine(session, self._driver, self._options.device_id, self._stream)


class CudaEngine(OrtEngine):
    """One partition in an ONNX Runtime session on the GPU; its contexts stage host memory.

    Closing drops the session; the engine's stream outlives it (it belongs to the caller or
    to the driver's per-device shared streams)."""

    def __init__(
        self, session: ort.InferenceSession, drv: CudaDriver, device_id: int, stream: int
    ) -> None:
        super().__init__(session, "cuda")
        self._driver = drv
        self._device_id = device_id
        self._stream = stream

    @property
    def stream(self) -> int:
        return self._stream

    def new_context(self) -> CudaContext:
        return CudaContext(self._session, self._driver, self._device_id, self._stream)
