"""ONNX Runtime backend: CPU execution provider (and CUDA/TensorRT, see _cuda.py).

Binding goes through ``IOBinding`` with raw pointers, so inputs are read from and outputs
written to the caller's memory in place; a context rebinds only when an address changes.
``run`` calls the C++ session directly (``InferenceSession._sess``) to skip the Python
wrapper's per-call bookkeeping; ONNX Runtime releases the GIL while it runs.

Outputs whose shape depends on the data (NonZero, NonMaxSuppression, ...) are the one place
a copy happens: ONNX Runtime learns their shape only while it runs and refuses memory bound
with any other shape, so it allocates them itself (bound anew before every run; IOBinding
would otherwise keep the first run's shape) and the context copies the produced bytes, and
only those, into the caller's memory after the run (one ``memcpy``; see
``benchmarks/dynamic_outputs.py`` for what it costs against a static output).

Threads: each partition has one ``InferenceSession`` shared by every slot; its intra-op pool
has ``num_threads`` threads (the runner picks it, see runner/_options.py). By default they
block when idle, so they do not take the CPU from Python pre/post-processing or from other
processes; with ``engine_spinning`` they spin between the parallel sections of a run, as
onnxruntime's own default does, and stop when the run returns
(``session.force_spinning_stop``), never between runs.
"""

from __future__ import annotations

import ctypes
import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import onnxruntime as ort

from ..model import ELEM_OF, Partition
from ..types import DataType, ModelLoadError, UnsupportedError, atomic_path, cpu_info
from ._base import Capabilities
from ._cache import EngineCache

logger = logging.getLogger(__name__)

#: IOBinding's C device objects, by (device, id): made once (engine-allocated outputs).
_C_DEVICES: dict[tuple[str, int], Any] = {}

#: ONNX Runtime on the CPU: host memory, its C++ run as the fast path's call, and an
#: intra-op thread pool per session (async jobs get sessions of their own).
#: onnxruntime's CPU provider computes float graphs in fp32: it has BF16 kernels for a few
#: ops only, so a "bf16" run would be fp32 with casts (slower, and not what was asked).
CPU_CAPABILITIES = Capabilities(
    raw_call=True,
    threads_per_engine=True,
    precision_note="onnxruntime's CPU provider has no general BF16/FP16 arithmetic "
    "(BF16 runs on OpenVINO only)",
)


def session_options(num_threads: int, spinning: bool = False) -> ort.SessionOptions:
    """copyless's session settings: ``num_threads`` intra-op threads, sequential execution,
    full graph optimization. ``spinning``: the pool's threads spin within a run and stop when
    it returns (lower latency per parallel section: measured 10-25% per EfficientNet-Lite0
    frame on an otherwise idle 2-core machine); else they block at once (much lower latency
    when other processes compete for the cores)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, num_threads)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if spinning:  # spin during a run only: nothing spins while Python pre/postprocesses
        options.add_session_config_entry("session.force_spinning_stop", "1")
    options.log_severity_level = 3
    return options


class OrtContext:
    """An IOBinding plus the addresses it holds, for one execution slot.

    ``device``/``device_id`` name where bound memory lives, as IOBinding takes them ("cpu", 0
    here; the CUDA context, in _cuda.py, binds device memory through the same object).
    """

    __slots__ = (
        "_binding",
        "_bound",
        "_device",
        "_device_id",
        "_dynamic",
        "_order",
        "_produced",
        "_raw_binding",
        "_raw_session",
        "_session",
    )

    def __init__(self, session: ort.InferenceSession, device: str, device_id: int = 0) -> None:
        self._session = session
        self._device = device
        self._device_id = device_id
        self._binding = session.io_binding()
        # The C++ objects behind the wrappers: the per-call fast path.
        self._raw_session: Any = getattr(session, "_sess", None)
        self._raw_binding: Any = getattr(self._binding, "_iobinding", None)
        self._bound: dict[str, tuple[int, tuple[int, ...]]] = {}
        # IOBinding lists outputs in the order they were first bound: name -> index.
        self._order: dict[str, int] = {}
        # Data-dependent outputs: name -> (caller address, capacity in bytes).
        self._dynamic: dict[str, tuple[int, int]] = {}
        self._produced: dict[str, tuple[int, ...]] = {}

    def bind_input(
        self, name: str, address: int, data_type: DataType, shape: tuple[int, ...]
    ) -> None:
        self._bind_at(self._binding.bind_input, name, address, data_type, shape)

    def bind_output(
        self, name: str, address: int, data_type: DataType, shape: tuple[int, ...]
    ) -> None:
        self._fixed_output(name)
        self._bind_at(self._binding.bind_output, name, address, data_type, shape)

    def _fixed_output(self, name: str) -> None:
        """``name`` is about to be bound to fixed memory (no longer engine-allocated)."""
        self._dynamic.pop(name, None)
        self._order.setdefault(name, len(self._order))

    def _bind_at(
        self, bind: Any, name: str, address: int, data_type: DataType, shape: tuple[int, ...]
    ) -> None:
        """``bind`` (IOBinding's bind_input/bind_output) unless ``name`` already holds it."""
        key = (address, shape)
        if self._bound.get(name) == key:
            return
        bind(name, self._device, self._device_id, ELEM_OF[data_type], list(shape), address)
        self._bound[name] = key

    def bind_output_dynamic(
        self, name: str, address: int, data_type: DataType, capacity: tuple[int, ...]
    ) -> None:
        """Let ONNX Runtime allocate output ``name``; :meth:`run` copies the produced bytes
        to ``address`` when they fit in ``capacity`` (a copy: see the module docstring)."""
        self._order.setdefault(name, len(self._order))
        self._bind_engine_allocated(name)  # now: IOBinding's order must follow _order
        self._dynamic[name] = (address, math.prod(capacity) * data_type.itemsize)
        self._bound[name] = (0, ())

    def call_target(self) -> tuple[Any, tuple[Any, ...]]:
        """(callable, args) running the bound graph: the C++ call the runner's fast path
        replays without a Python frame in between."""
        if self._raw_session is not None and self._raw_binding is not None:
            return (self._raw_session.run_with_iobinding, (self._raw_binding, None))
        return (self.run, ())  # pragma: no cover - wrappers without the private attributes

    def order_after(self, streams: tuple[int, ...]) -> None:
        raise UnsupportedError("an ONNX Runtime CPU context runs on no CUDA stream")

    def start(self, done: Callable[[BaseException | None], None]) -> None:
        raise UnsupportedError("ONNX Runtime has no native async run (native_async=False)")

    def run(self) -> None:
        self._rebind_dynamic()
        if self._raw_session is not None and self._raw_binding is not None:
            self._raw_session.run_with_iobinding(self._raw_binding, None)
        else:  # pragma: no cover - older/newer wrappers without the private attributes
            self._session.run_with_iobinding(self._binding)
        if self._dynamic:
            self._copy_dynamic()

    def _rebind_dynamic(self) -> None:
        """Before a run: data-dependent outputs left to the engine again (IOBinding keeps the
        last run's result, whose shape the next run would have to match)."""
        for name in self._dynamic:
            self._bind_engine_allocated(name)

    def _bind_engine_allocated(self, name: str) -> None:
        if self._raw_binding is not None:
            self._raw_binding.bind_output(name, self._c_device())
        else:  # pragma: no cover - wrappers without the private attributes
            self._binding.bind_output(name, self._device, self._device_id)

    def _c_device(self) -> Any:
        device = _C_DEVICES.get((self._device, self._device_id))
        if device is None:
            device = ort.OrtDevice.make(self._device, self._device_id)._get_c_device()
            _C_DEVICES[(self._device, self._device_id)] = device
        return device

    def _copy_dynamic(self) -> None:
        """Record each data-dependent output's shape; copy its bytes out when they fit."""
        raw = self._raw_binding
        values = raw.get_outputs() if raw is not None else self._binding.get_outputs()
        for name, (address, capacity) in self._dynamic.items():
            value = values[self._order[name]]
            self._produced[name] = tuple(value.shape())
            nbytes = value.tensor_size_in_bytes()
            if 0 < nbytes <= capacity:
                self._copy_out(address, value.data_ptr(), nbytes)

    def _copy_out(self, address: int, source: int, nbytes: int) -> None:
        """Copy an engine-allocated result into the caller's memory (host here)."""
        ctypes.memmove(address, source, nbytes)

    def produced_shape(self, name: str) -> tuple[int, ...]:
        return self._produced[name]

    def close(self) -> None:
        self._binding.clear_binding_inputs()
        self._binding.clear_binding_outputs()
        self._bound.clear()
        self._order.clear()
        self._dynamic.clear()


class OrtEngine:
    """One partition in an ONNX Runtime session."""

    def __init__(
        self,
        session: ort.InferenceSession,
        device: str,
        capabilities: Capabilities = CPU_CAPABILITIES,
    ) -> None:
        self._session = session
        self._device = device
        self._capabilities = capabilities
        self._inputs = tuple(i.name for i in session.get_inputs())
        self._outputs = tuple(o.name for o in session.get_outputs())

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def input_names(self) -> tuple[str, ...]:
        return self._inputs

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._outputs

    @property
    def session(self) -> ort.InferenceSession:
        return self._session

    def new_context(self) -> OrtContext:
        return OrtContext(self._session, self._device)

    def close(self) -> None:
        # Dropping the last reference frees the C++ session.
        self._session = None  # type: ignore[assignment,unused-ignore]


class OrtCpuBackend:
    """ONNX Runtime's CPU execution provider (``spinning``: see :func:`session_options`;
    ``cache``: optimized graphs are kept there, see :func:`create_session`)."""

    name = "onnxruntime"
    device = "cpu"
    capabilities = CPU_CAPABILITIES

    def __init__(self, spinning: bool = False, cache: EngineCache | None = None) -> None:
        self.spinning = spinning
        self.cache = cache

    def load(self, partition: Partition, num_threads: int) -> OrtEngine:
        session = create_session(
            partition, num_threads, ["CPUExecutionProvider"], spinning=self.spinning,
            cache=self.cache,
        )  # fmt: skip
        return OrtEngine(session, "cpu")


class OrtSettings(Protocol):
    """What this backend reads of ``copyless.runner.RunnerOptions`` (a later layer)."""

    @property
    def engine_spinning(self) -> bool: ...


def create_backend(options: OrtSettings, cache: EngineCache | None) -> OrtCpuBackend:
    """The registry's entry (see :mod:`copyless.backends._registry`)."""
    return OrtCpuBackend(options.engine_spinning, cache)


def create_session(
    partition: Partition,
    num_threads: int,
    providers: list[Any],
    config: Mapping[str, str] | None = None,
    spinning: bool = False,
    cache: EngineCache | None = None,
) -> ort.InferenceSession:
    """An InferenceSession of ``partition``'s graph (one copy of the graph bytes, which the
    session parses), with ``config`` added as session config entries. Engine errors become
    ModelLoadError (UnsupportedError where onnxruntime has no kernel for the graph).

    With a ``cache``, the graph onnxruntime optimized on the first load is saved there and
    later loads read it with optimizations off (4-5x faster to load, the same graph)."""
    options = session_options(num_threads, spinning)
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    if cache is None:
        return _new_session(partition, bytes(partition.onnx_bytes), options, providers)
    providers_named = "+".join(map(_provider_name, providers))
    tag = f"onnxruntime-{ort.__version__}-{providers_named}-{cpu_info().tag}"
    optimized = cache.folder(partition, tag) / "model.onnx"
    if optimized.is_file():
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            session = _new_session(partition, str(optimized), options, providers)
        except (ModelLoadError, UnsupportedError) as exc:
            logger.warning("engine cache %s unusable, rebuilding it: %s", optimized, exc)
            optimized.unlink(missing_ok=True)
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        else:
            cache.note(hit=True)
            return session
    session = _storing_session(partition, optimized, options, providers, cache)
    if session is None:  # saving can fail where loading does not (graphs over 2 GB)
        return create_session(partition, num_threads, providers, config, spinning)
    return session


def _storing_session(
    partition: Partition,
    optimized: Path,
    options: ort.SessionOptions,
    providers: list[Any],
    cache: EngineCache,
) -> ort.InferenceSession | None:
    """A session of ``partition`` whose optimized graph onnxruntime saves, atomically, at
    ``optimized``; None where saving it fails (ModelLoadError). A session whose graph
    cannot be stored (a full disk) is kept, with a warning."""
    session = None
    try:
        with atomic_path(optimized) as scratch:
            options.optimized_model_filepath = str(scratch)
            session = _new_session(partition, bytes(partition.onnx_bytes), options, providers)
    except ModelLoadError:
        return None
    except OSError as exc:
        if session is None:
            raise
        logger.warning("engine cache: cannot store %s: %s", optimized, exc)
    else:
        cache.note(hit=False)
    return session


def _provider_name(provider: Any) -> str:
    """``"CPUExecutionProvider"`` or ``("CUDAExecutionProvider", {...})`` -> ``"CPU"``."""
    name = provider[0] if isinstance(provider, tuple) else str(provider)
    return name.removesuffix("ExecutionProvider")


def _new_session(
    partition: Partition, model: bytes | str, options: ort.SessionOptions, providers: list[Any]
) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(model, sess_options=options, providers=providers)
    except ort.capi.onnxruntime_pybind11_state.NotImplemented as exc:
        raise UnsupportedError(f"{partition.name}: onnxruntime cannot run it: {exc}") from exc
    except Exception as exc:  # onnxruntime raises bare RuntimeErrors
        raise ModelLoadError(f"{partition.name}: onnxruntime refused the graph: {exc}") from exc
