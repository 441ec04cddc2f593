"""OpenVINO backend: each "npu" partition compiled by ``openvino.Core`` (CPU by default).

Runner options read here (see runner/_options.py):

* ``device``: ``"cpu"`` (the default) means OpenVINO's ``"CPU"`` plugin; any OpenVINO device
  name (``"CPU"``, ``"GPU"``, ``"GPU.1"``, ``"NPU"``, ``"AUTO"``, ``"HETERO:GPU,CPU"``) is
  passed through. ``"cuda"``/``"tensorrt"`` are ONNX Runtime devices: UnsupportedError, never
  a silent fallback. A device the local OpenVINO does not list is UnsupportedError too.
* ``performance_hint``: ``"LATENCY"`` (default: one stream using every engine thread, best
  for one job at a time), ``"THROUGHPUT"`` (several streams, for overlapping async jobs,
  sized by ``max_concurrent_runs``), ``"AUTO"`` (THROUGHPUT when ``max_concurrent_runs > 1``,
  else LATENCY).
* ``num_threads`` (``options.engine_threads()``): ``INFERENCE_NUM_THREADS`` on the CPU plugin.

* ``inference_precision``: ``"model"`` (default) runs float graphs in f32, the precision
  their HW view declares (the runner turns it into ``"bf16"`` for a model compiled with
  ``precision="bf16"``, whose record states the price). Left to itself, OpenVINO runs them in
  bf16 on CPUs with AMX or AVX512-BF16 (faster, but results then differ from ONNX Runtime's
  around 1e-2, enough to reorder close top-5 scores): that is ``"engine"``.
  ``"f32"``/``"bf16"``/``"f16"`` force one; the backend declares ``"bf16"`` in
  ``Capabilities.precisions`` only where the CPU plugin lists BF16 in its
  ``OPTIMIZATION_CAPABILITIES`` (AVX512_BF16 or AMX), and the runner refuses it elsewhere.
  QDQ (INT8) graphs run on OpenVINO's int8 kernels whatever this says (see
  :meth:`OvEngine.runtime_precisions`).

Zero-copy: a context wraps the caller's memory in an ``openvino.Tensor`` that shares it (no
copy) and sets it with ``set_input_tensor``/``set_output_tensor``; inference reads the inputs
and writes the outputs in place. Wrapping happens only when an address or shape changes.
Outputs whose shape depends on the data are written in place too, into a tensor OpenVINO
resizes within the caller's capacity; the cases that copy are listed in
:mod:`._openvino_dynamic`.

``run`` calls the C++ ``InferRequest.infer`` directly (the Python wrapper's input dispatch
is skipped: nothing is passed); OpenVINO releases the GIL while it infers.

Without the ``openvino`` package, importing this module raises UnsupportedError telling the
user to ``pip install copyless[openvino]``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import onnx

from ..model import Partition
from ..types import DataType, ModelLoadError, UnsupportedError, bf16_refusal, cpu_capabilities
from ._base import Capabilities
from ._cache import EngineCache
from ._openvino_async import FailureWatch
from ._openvino_dynamic import Aliases, DynamicOutputs
from ._openvino_graph import check_graph, needs_adjusting, reason, stable_topk
from ._openvino_ports import Ports, find_ports

# openvino comes through the helper module, whose import maps a missing package to
# UnsupportedError with the install hint (the factory's ModuleNotFoundError would not).
from ._openvino_tensors import (
    INSTALL_HINT,
    device_name,
    host_tensor,
    ov,
    raw_infer,
    raw_infer_call,
)

__all__ = ["INSTALL_HINT", "OpenVinoBackend", "OvContext", "OvEngine", "create_backend"]

logger = logging.getLogger(__name__)
_RUN = raw_infer()
#: Host memory wrapped in place, ``InferRequest.infer`` as the fast path's call; the
#: streams of one compiled model serve every request, so async jobs share the engines.
#: ``native_async`` (:meth:`OvContext.start`, ``start_async``) is declared when the runner
#: option ``native_async`` asks for it (:data:`NATIVE_ASYNC`). The runner starts such runs
#: from a job worker, never the submitting thread: measured on Lite0 (``copyless-bench
#: first_submit``, 2 cores under load 30), ``start_async`` did part of the run on the thread
#: that called it (first submit 34.7 ms cold / 5.7 ms after warm_up, second 171 ms cold).
CAPABILITIES = Capabilities(raw_call=True, throughput_engines=True)
NATIVE_ASYNC = Capabilities(raw_call=True, native_async=True, throughput_engines=True)


class OvContext:
    """One ``InferRequest`` (one execution slot) plus the addresses bound to it."""

    __slots__ = ("_aliases", "_bound", "_callback_set", "_claim", "_done", "_dynamic",
                 "_indices", "_outputs", "_request", "_watch")  # fmt: skip

    def __init__(self, compiled: Any, ports: Ports, watch: FailureWatch) -> None:
        self._request = compiled.create_infer_request()
        self._watch = watch
        self._indices = ports.inputs  # a dropped input has no port: binding it is a no-op
        self._outputs = ports.outputs
        self._aliases = Aliases(ports.aliases)
        self._bound: dict[str, tuple[int, tuple[int, ...]]] = {}
        self._dynamic = DynamicOutputs(self._request, ports.outputs)
        self._done: Callable[[BaseException | None], None] | None = None
        self._claim = threading.Lock()  # the callback and the failure watch race to end a run
        self._callback_set = False

    def bind_input(
        self, name: str, address: int, data_type: DataType, shape: tuple[int, ...]
    ) -> None:
        self._aliases.note(name, address, data_type, shape)
        port = self._indices.get(name)
        if port is not None:
            self._bind(self._request.set_input_tensor, port, name, address, data_type, shape)

    def bind_output(
        self, name: str, address: int, data_type: DataType, shape: tuple[int, ...]
    ) -> None:
        self._aliases.note(name, address, data_type, shape)
        port = self._outputs[name]
        self._dynamic.unbind(name)
        self._bind(self._request.set_output_tensor, port, name, address, data_type, shape)

    def _bind(
        self,
        setter: Any,
        port: int,
        name: str,
        address: int,
        data_type: DataType,
        shape: tuple[int, ...],
    ) -> None:
        """``setter(port, tensor over address)`` unless ``name`` already holds it."""
        key = (address, shape)
        if self._bound.get(name) == key:
            return
        setter(port, host_tensor(address, data_type, shape))
        self._bound[name] = key

    def bind_output_dynamic(
        self, name: str, address: int, data_type: DataType, capacity: tuple[int, ...]
    ) -> None:
        """Bind the caller's memory for a data-dependent output (in place, or copied into:
        :mod:`._openvino_dynamic` says when)."""
        key = (address, (-1, *capacity))  # -1: never equal to a fixed binding's shape
        self._aliases.note(name, address, data_type, capacity)
        if self._bound.get(name) == key:
            return
        self._dynamic.bind(name, address, data_type, capacity)
        self._bound[name] = key

    def run(self) -> None:
        _RUN(self._request)
        if self._dynamic:
            self._dynamic.collect()
        if self._aliases:
            self._aliases.copy(self._dynamic.shapes)

    def start(self, done: Callable[[BaseException | None], None]) -> None:
        """``InferRequest.start_async`` (returns at once; OpenVINO runs the request on its
        own streams); ``done(None)`` is called on OpenVINO's callback thread when it ends,
        ``done(error)`` by the engine's :class:`FailureWatch` when it fails (OpenVINO calls no
        callback then). The callback is set once per request, the ``done`` of each run kept
        here: one run per request at a time."""
        if not self._callback_set:
            self._request.set_callback(self._finished, None)
            self._callback_set = True
        self._done = done
        self._watch.add(self)
        try:
            self._request.start_async()
        except BaseException:
            self._take()
            raise

    def _take(self) -> Callable[[BaseException | None], None] | None:
        """The run's ``done``, for whoever ends the run first (then None)."""
        with self._claim:
            done, self._done = self._done, None
        self._watch.discard(self)
        return done

    def _finished(self, _userdata: object) -> None:
        done = self._take()
        if done is None:
            return
        error: BaseException | None = None
        try:
            if self._dynamic:
                self._dynamic.collect()
            if self._aliases:
                self._aliases.copy(self._dynamic.shapes)
        except Exception as exc:  # noqa: BLE001 - handed to the runner as the run's error
            error = exc
        done(error)

    def check_failed(self) -> None:
        """For the failure watch: end the run with its error if it failed."""
        if self._done is None:
            return
        try:
            self._request.wait_for(0)
        except Exception as exc:  # noqa: BLE001 - the run's error, reported as such
            done = self._take()
            if done is not None:
                done(exc)

    def call_target(self) -> tuple[Any, tuple[Any, ...]]:
        """(callable, args) the runner's fast path replays: the C++ infer of this request."""
        return raw_infer_call(self._request)

    def produced_shape(self, name: str) -> tuple[int, ...]:
        return self._dynamic.shapes[name]

    def order_after(self, streams: tuple[int, ...]) -> None:
        raise UnsupportedError("an OpenVINO context runs on no CUDA stream")

    @property
    def request(self) -> Any:
        """The ``openvino.InferRequest`` (for inspection and tests)."""
        return self._request

    def close(self) -> None:
        self._bound.clear()
        self._request = None


class OvEngine:
    """One partition compiled by OpenVINO."""

    def __init__(
        self,
        compiled: Any,
        partition: Partition,
        capabilities: Capabilities = CAPABILITIES,
        graph: onnx.ModelProto | None = None,
    ) -> None:
        if graph is None:
            graph = onnx.load_from_string(bytes(partition.onnx_bytes))
        self._ports = find_ports(compiled, partition, graph)
        # an output OpenVINO passes through from an input is copied after each run by the
        # context: the fast path must call the context's run, not OpenVINO's infer alone
        self.capabilities = (
            dataclasses.replace(capabilities, raw_call=False)
            if self._ports.aliases
            else capabilities
        )
        self._compiled = compiled
        self._partition_inputs = partition.inputs
        self._outputs = self._ports.outputs
        self._watch = FailureWatch()  # ends the failed async runs of this engine's contexts

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self._partition_inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(self._outputs)

    @property
    def compiled_model(self) -> Any:
        """The ``openvino.CompiledModel`` (for inspection: properties, runtime model)."""
        return self._compiled

    def runtime_precisions(self, layer_type: str) -> set[str]:
        """The precisions OpenVINO runs layers of ``layer_type`` (e.g. ``"Convolution"``) in:
        ``{"i8"}``/``{"u8"}`` for a quantized graph on int8 kernels, ``{"f32"}`` otherwise."""
        found: set[str] = set()
        for op in self._compiled.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()  # values are OVAny: .astype(str) unwraps them
            if "layerType" in info and info["layerType"].astype(str) == layer_type:
                found.add(info["runtimePrecision"].astype(str))
        return found

    def new_context(self) -> OvContext:
        return OvContext(self._compiled, self._ports, self._watch)

    def close(self) -> None:
        # Dropping the last reference frees the compiled model (contexts hold their own).
        self._compiled = None
        self._watch.close()


class OpenVinoSettings(Protocol):
    """What this backend reads of ``copyless.runner.RunnerOptions`` (a later layer)."""

    @property
    def device(self) -> str: ...

    @property
    def performance_hint(self) -> str: ...

    @property
    def native_async(self) -> bool: ...

    @property
    def max_concurrent_runs(self) -> int: ...

    @property
    def inference_precision(self) -> str: ...


class OpenVinoBackend:
    """OpenVINO on the device and with the performance hint the runner options name."""

    name = "openvino"

    def __init__(self, options: OpenVinoSettings, cache: EngineCache | None = None) -> None:
        self._cache = cache
        self._core = ov.Core()
        self._device = device_name(options.device, self._core.available_devices)
        base = NATIVE_ASYNC if options.native_async else CAPABILITIES
        self.capabilities = _with_precisions(base, self._device, cpu_capabilities(self._core))
        hint = options.performance_hint
        if hint == "AUTO":
            hint = "THROUGHPUT" if options.max_concurrent_runs > 1 else "LATENCY"
        self._config: dict[str, Any] = {"PERFORMANCE_HINT": hint}
        if hint == "THROUGHPUT":
            self._config["PERFORMANCE_HINT_NUM_REQUESTS"] = options.max_concurrent_runs
        precision = options.inference_precision
        if precision != "engine":
            self._config["INFERENCE_PRECISION_HINT"] = "f32" if precision == "model" else precision

    @property
    def device(self) -> str:
        return self._device

    def load(self, partition: Partition, num_threads: int) -> OvEngine:
        graph = check_graph(partition)
        config = dict(self._config)
        if self._device.split(".")[0] == "CPU":
            config["INFERENCE_NUM_THREADS"] = max(1, num_threads)
        compiled = None
        # OpenVINO's cache compiles the graph file as it is: a graph to adjust is compiled
        # from the adjusted model, uncached
        if self._cache is not None and not needs_adjusting(graph):
            compiled = _load_cached(self._core, self._device, self._cache, partition, config)
        if compiled is None:
            compiled = self._load_uncached(partition, config)
        logger.debug("%s compiled for %s with %s", partition.name, self._device, config)
        return OvEngine(compiled, partition, self.capabilities, graph)

    def _load_uncached(self, partition: Partition, config: dict[str, Any]) -> Any:
        try:
            model = self._core.read_model(model=bytes(partition.onnx_bytes))
        except Exception as exc:
            # A graph OpenVINO parses but has no conversion for is unsupported, not corrupt.
            error = UnsupportedError if "OpConversionFailure" in str(exc) else ModelLoadError
            raise error(f"{partition.name}: OpenVINO cannot read it: {reason(exc)}") from exc
        stable_topk(model)
        try:
            return self._core.compile_model(model, self._device, config)
        except Exception as exc:
            raise UnsupportedError(
                f"{partition.name}: OpenVINO cannot compile it for {self._device}: {reason(exc)}"
            ) from exc

def _with_precisions(base: Capabilities, device: str, listed: tuple[str, ...]) -> Capabilities:
    """``base`` declaring the precisions OpenVINO computes in on ``device``: bf16 (f16) on a
    CPU only where the plugin lists BF16 (FP16); other devices follow their plugin's rules."""
    if device.split(".")[0] != "CPU":
        return dataclasses.replace(base, precisions=("f32", "bf16", "f16"))
    refusal = bf16_refusal(listed)
    precisions = ("f32", *(() if refusal else ("bf16",)), *(("f16",) if "FP16" in listed else ()))
    note = "; ".join(
        [*([refusal] if refusal else []), *([] if "FP16" in listed else ["no FP16 arithmetic"])]
    )
    return dataclasses.replace(base, precisions=precisions, precision_note=note)


def _load_cached(
    core: Any, device: str, cache: EngineCache, partition: Partition, config: dict[str, Any]
) -> Any:
    """Compile through OpenVINO's own cache (``CACHE_DIR``), which needs the graph as a
    file: 5-11x faster on a hit. None when that fails (the caller loads uncached and raises
    the precise error)."""
    folder = cache.folder(partition, f"openvino-{ov.__version__}-{device}")
    before = sum(1 for _ in folder.iterdir())
    try:
        compiled = core.compile_model(
            str(cache.graph_file(partition)), device, {**config, "CACHE_DIR": str(folder)}
        )
    except Exception as exc:  # noqa: BLE001 - retried uncached, which reports it
        logger.debug("%s: cached compile failed: %s", partition.name, exc)
        return None
    cache.note(hit=sum(1 for _ in folder.iterdir()) == before)
    return compiled


def create_backend(options: OpenVinoSettings, cache: EngineCache | None) -> OpenVinoBackend:
    """The registry's entry (see :mod:`copyless.backends._registry`)."""
    return OpenVinoBackend(options, cache)
