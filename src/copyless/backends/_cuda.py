"""ONNX Runtime on NVIDIA GPUs: the CUDA (device "cuda") and TensorRT ("tensorrt") providers.

Never a silent CPU fallback: construction raises :class:`DeviceUnavailableError` (an
``OptionError`` and an ``UnsupportedError``) with one line naming what is missing: the GPU
provider in this onnxruntime build, CuPy, the NVIDIA driver, the device, or a CUDA library
the provider needs. CuPy (streams, events, pointer queries) is imported on first use.

Binding (``IOBinding``): device memory on this GPU is bound in place (zero-copy); host memory
is bound as host memory, and ONNX Runtime copies it in and out inside the run, on the
engine's stream (the only copies this backend makes, with one more: an output whose shape
depends on the data is allocated by ONNX Runtime on the GPU and its produced bytes copied
into the caller's memory after the run; none with ``cuda_graph``, which takes device memory
only and refuses such outputs).

Streams: every context runs on one CUDA stream, given to the provider as
``user_compute_stream``: the ``stream`` option (all contexts share it and one session), or
by default a stream per context, each with its own session, so concurrent async jobs
overlap. copyless's streams are blocking: work a producer queued on the legacy default
stream (PyTorch's and CuPy's default) is ordered before the engine without anything to do.
A producer on another stream is ordered by :meth:`CudaContext.order_after` (before every
run, an event on its stream, waited on by ours: no host wait). ONNX Runtime synchronizes
the stream at the end of ``Run``, so outputs are complete when ``run`` returns.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Protocol

import onnxruntime as ort

from ..memory import cuda as cuda_memory
from ..model import ELEM_OF, Partition
from ..types import DataType, DeviceUnavailableError, OptionError, TensorError
from ._base import HOST, Capabilities
from ._cache import EngineCache
from ._cuda_options import (
    PROVIDERS,
    CudaOptions,
    check_available,
    parse_cuda_options,
    provider_list,
)
from ._onnxruntime import OrtContext, create_session

logger = logging.getLogger(__name__)
_LEGACY_STREAM = 1  # cudaStreamLegacy

__all__ = ["CudaBackend", "CudaContext", "CudaEngine", "check_available", "create_backend"]


class CudaSettings(Protocol):
    """What this backend reads of ``copyless.runner.RunnerOptions`` (a later layer)."""

    @property
    def device(self) -> str: ...

    @property
    def cuda_options(self) -> CudaOptions: ...


class CudaBackend:
    """ONNX Runtime's CUDA or TensorRT provider on one GPU."""

    name = "onnxruntime"

    def __init__(self, options: CudaSettings) -> None:
        if options.device not in PROVIDERS:
            raise OptionError(f"CudaBackend runs 'cuda' or 'tensorrt', not {options.device!r}")
        self._device = options.device
        self._options = parse_cuda_options(options.cuda_options)
        check_available(self._device, self._options.device_id)
        graphs = self._options.cuda_graph
        memory = f"cuda:{self._options.device_id}"
        self._capabilities = Capabilities(
            memory=(memory,) if graphs else (HOST, memory),
            stream=True,
            engine_outputs=not graphs,
            cuda_graphs=graphs,
            precision_note="the CUDA backend runs the graph's own precision (TensorRT's FP16: "
            "cuda_options trt_fp16; BF16 arithmetic runs on OpenVINO only)",
        )

    @property
    def device(self) -> str:
        return self._device

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def options(self) -> CudaOptions:
        return self._options

    def load(self, partition: Partition, num_threads: int) -> CudaEngine:
        return CudaEngine(self, partition, num_threads)

    def session(
        self, partition: Partition, num_threads: int, stream: int
    ) -> ort.InferenceSession:
        """A session of ``partition`` on ``stream``; refused if the GPU provider did not take
        it (onnxruntime would quietly run it on the CPU)."""
        strict = {"session.disable_cpu_ep_fallback": "1"} if self._options.strict else None
        providers = provider_list(self._device, self._options, stream)
        session = create_session(partition, num_threads, providers, strict)
        wanted = PROVIDERS[self._device]
        if wanted not in session.get_providers():
            raise DeviceUnavailableError(
                f"{partition.name}: onnxruntime did not enable {wanted} (it would run on "
                f"{session.get_providers()}); its log names the missing library"
            )
        return session


class _Lane:
    """A session and the stream it runs on (``stream``: a CuPy Stream we own, None for the
    caller's handle). Closing drops the session first: it may use the stream until then."""

    __slots__ = ("handle", "session", "stream")

    def __init__(self, session: ort.InferenceSession, stream: Any, handle: int) -> None:
        self.session: ort.InferenceSession | None = session
        self.stream = stream
        self.handle = handle

    def close(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()  # nothing of ours may still run on it
        self.session = None
        self.stream = None


class CudaEngine:
    """One partition on the GPU. The first context uses the session loaded here; later ones
    get sessions on streams of their own, unless the ``stream`` option names one stream."""

    def __init__(self, backend: CudaBackend, partition: Partition, num_threads: int) -> None:
        self._backend, self._partition, self._threads = backend, partition, num_threads
        self._graph_ids = itertools.count()  # one CUDA graph per binding of a context
        self._lanes: list[_Lane] = []
        session, lane = self._new_lane()
        self._first: tuple[ort.InferenceSession, _Lane] | None = (session, lane)
        self._inputs = tuple(i.name for i in session.get_inputs())
        self._outputs = tuple(o.name for o in session.get_outputs())

    def _new_lane(self) -> tuple[ort.InferenceSession, _Lane]:
        options = self._backend.options
        if options.stream is not None:
            handle, stream = options.stream, None
        else:
            cupy = cuda_memory.cupy_module()
            with cupy.cuda.Device(options.device_id):
                stream = cupy.cuda.Stream(non_blocking=options.cuda_graph)
            handle = int(stream.ptr)
        session = self._backend.session(self._partition, self._threads, handle)
        lane = _Lane(session, stream, handle)
        self._lanes.append(lane)
        return session, lane

    @property
    def capabilities(self) -> Capabilities:
        return self._backend.capabilities

    @property
    def input_names(self) -> tuple[str, ...]:
        return self._inputs

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._outputs

    @property
    def session(self) -> ort.InferenceSession | None:
        """The first session (for inspection); None once closed."""
        return self._lanes[0].session if self._lanes else None

    def new_context(self) -> CudaContext:
        options = self._backend.options
        shared = self._lanes[0] if options.stream is not None and self._lanes else None
        if self._first is not None:
            (session, lane), self._first = self._first, None
        elif shared is not None and shared.session is not None:
            session, lane = shared.session, shared  # one stream: one session
        else:
            session, lane = self._new_lane()
        return CudaContext(session, lane, options, self._graph_ids)

    def close(self) -> None:
        for lane in self._lanes:
            lane.close()
        self._lanes.clear()
        self._first = None


class CudaContext(OrtContext):
    """An IOBinding on one session and stream (see the module docstring)."""

    __slots__ = ("_blocking", "_graph", "_graph_ids", "_lane", "_run_options", "_waits")

    def __init__(
        self,
        session: ort.InferenceSession,
        lane: _Lane,
        options: CudaOptions,
        graph_ids: itertools.count[int],
    ) -> None:
        super().__init__(session, "cuda", options.device_id)
        self._lane = lane
        self._graph = options.cuda_graph
        self._graph_ids = graph_ids
        self._run_options: ort.RunOptions | None = None
        # Our streams are blocking (ordered after the legacy default stream), except with
        # graphs; a caller's stream may be either: then the legacy stream is waited for.
        self._blocking = options.stream is None and not self._graph
        self._waits: tuple[int, ...] = ()
        self.order_after(())

    @property
    def stream(self) -> int:
        """The CUDA stream handle this context's runs are queued on."""
        return self._lane.handle

    def _bind_at(
        self, bind: Any, name: str, address: int, data_type: DataType, shape: tuple[int, ...]
    ) -> None:
        """Device memory of this GPU in place; host memory for ONNX Runtime to copy (the
        ``bind_input``/``bind_output`` of :class:`OrtContext` call this)."""
        if self._bound.get(name) == (address, shape):
            return
        owner = cuda_memory.pointer_device(address)
        if owner is not None and owner != self._device_id:
            raise TensorError(f"{name!r}: memory on cuda:{owner}, engine on cuda:{self._device_id}")
        if owner is None and self._graph:
            raise TensorError(f"{name!r}: cuda_graph binds device memory only, not host memory")
        where = ("cpu", 0) if owner is None else ("cuda", owner)
        bind(name, *where, ELEM_OF[data_type], list(shape), address)
        self._bound[name] = (address, shape)
        self._run_options = None  # a captured graph holds the old addresses: capture anew

    def close(self) -> None:
        super().close()
        # Drop the session here: the engine destroys its stream on close, after its sessions.
        self._raw_binding = self._raw_session = None
        self._binding = self._session = None

    def order_after(self, streams: tuple[int, ...]) -> None:
        """Before every run, make this context's stream wait for the work queued on each of
        ``streams`` by then (an event each; the host does not wait). Its own stream, and the
        legacy default stream when ours is blocking, need nothing."""
        implicit = {self._lane.handle, _LEGACY_STREAM} if self._blocking else {self._lane.handle}
        waits = [stream for stream in streams if stream not in implicit]
        if not self._blocking and self._lane.stream is not None:
            waits.insert(0, _LEGACY_STREAM)  # our graph streams wait for it explicitly
        self._waits = tuple(dict.fromkeys(waits))

    def call_target(self) -> tuple[Any, tuple[Any, ...]]:
        return (self.run, ())  # the waits and graph ids below are Python

    def run(self) -> None:
        """The graph on the bound memory; returns when the outputs are complete."""
        if self._waits:
            self._wait_for_producers()
        if self._graph and self._run_options is None:
            self._run_options = ort.RunOptions()
            self._run_options.add_run_config_entry("gpu_graph_id", str(next(self._graph_ids)))
        self._rebind_dynamic()
        self._raw_session.run_with_iobinding(self._raw_binding, self._run_options)
        if self._dynamic:
            self._copy_dynamic()

    def bind_output_dynamic(
        self, name: str, address: int, data_type: DataType, capacity: tuple[int, ...]
    ) -> None:
        """ONNX Runtime allocates the output on this GPU; :meth:`run` copies the produced
        bytes into ``address`` (host or device memory of this GPU): one ``cudaMemcpy``."""
        owner = cuda_memory.pointer_device(address)
        if owner is not None and owner != self._device_id:
            raise TensorError(f"{name!r}: memory on cuda:{owner}, engine on cuda:{self._device_id}")
        super().bind_output_dynamic(name, address, data_type, capacity)

    def _copy_out(self, address: int, source: int, nbytes: int) -> None:
        # ONNX Runtime synchronized the stream: the result is complete. cudaMemcpyDefault
        # tells host from device memory by the pointers (unified addressing).
        cupy = cuda_memory.cupy_module()
        runtime = cupy.cuda.runtime
        with cupy.cuda.Device(self._device_id):
            runtime.memcpy(address, source, nbytes, runtime.memcpyDefault)

    def _wait_for_producers(self) -> None:
        cupy = cuda_memory.cupy_module()
        runtime = cupy.cuda.runtime
        with cupy.cuda.Device(self._device_id):
            for producer in self._waits:
                event = runtime.eventCreateWithFlags(runtime.eventDisableTiming)
                try:
                    runtime.eventRecord(event, producer)
                    runtime.streamWaitEvent(self._lane.handle, event, 0)
                finally:
                    runtime.eventDestroy(event)  # released by the driver once completed


def create_backend(options: CudaSettings, cache: EngineCache | None) -> CudaBackend:
    """The registry's entry (see :mod:`copyless.backends._registry`). ``cache`` is not used
    yet: ``create_session(..., cache=cache)`` would keep the optimized graphs, and
    ``cache.folder(partition, f"tensorrt-{version}")`` is the folder for TensorRT's
    ``trt_engine_cache_path`` (see :mod:`copyless.backends._cache`)."""
    del cache
    return CudaBackend(options)
