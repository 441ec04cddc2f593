"""The backend interface: what the runner needs from an inference engine.

A backend turns one compiled :class:`~copyless.model.Partition` into an :class:`Engine`;
an engine hands out :class:`EngineContext` objects, one per execution slot. A context holds
the engine's binding state (an ONNX Runtime ``IOBinding``, an OpenVINO ``InferRequest``), so
buffers bound once stay bound across runs: the runner rebinds only what changed.

Binding is by address: the runner passes the address, element type and shape of memory it
has already validated, and the engine reads and writes that memory in place (zero-copy).

What an engine can do beyond that is declared as data, in :class:`Capabilities`: the runner
reads the declaration (which memory it may bind, whether contexts order after a producer's
CUDA stream, whether the C fast path may call the engine directly...) and never probes an
object for methods or types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..model import Partition
from ..types import DataType

HOST = "cpu"  #: the device name of host memory in :attr:`Capabilities.memory`


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend's engines and contexts do beyond the core contract.

    ``memory``: the devices whose memory a context binds in place, by name as
    ``NpuTensor.device`` gives it: ``"cpu"`` (host memory) and/or ``"cuda:N"``. The runner
    refuses a tensor on any other device with INVALID_INPUT / INVALID_OUTPUT.
    ``stream``: contexts run on a CUDA stream and :meth:`EngineContext.order_after` makes
    their runs wait (on the GPU) for work queued on the producers' streams.
    ``raw_call``: :meth:`EngineContext.call_target` is the engine's own C entry point, so
    the runner's C fast path replays a call with no Python frame in between; otherwise the
    fast path calls :meth:`EngineContext.run`.
    ``engine_outputs``: contexts take outputs whose shape depends on the data
    (:meth:`EngineContext.bind_output_dynamic`, :meth:`EngineContext.produced_shape`);
    without it such models are refused at load time.
    ``threads_per_engine``: engine threads belong to a loaded engine (ONNX Runtime's
    intra-op pool), so the runner loads engines of their own, with fewer threads, for
    concurrent async jobs.
    ``cuda_graphs``: runs replay a captured CUDA graph, which needs every tensor at a fixed
    device address (``memory`` then lists no host memory).
    ``native_async``: :meth:`EngineContext.start` starts a run without blocking and reports
    its end on an engine thread (OpenVINO's asynchronous requests), so the runner starts
    async jobs from the submitting thread with no worker-thread hop in between.
    ``throughput_engines``: the backend compiles an engine for concurrent requests when the
    runner options ask for one (``performance_hint="THROUGHPUT"``: OpenVINO's streams, one
    core or so each), which serves concurrent async jobs better than the latency engine that
    ``execute`` runs on; the runner then loads such engines for its async jobs.
    ``precisions``: the arithmetic the engines run a float graph in when the runner asks for
    it (``inference_precision``, or a model compiled with ``precision="bf16"``): ``"f32"``
    always; ``"bf16"``/``"f16"`` only where the engine computes in them on this machine;
    ``precision_note`` says, in a clause, why the others are missing. The runner refuses a
    precision outside ``precisions`` with that note: never a silent emulation or fallback.
    """

    memory: tuple[str, ...] = (HOST,)
    stream: bool = False
    raw_call: bool = False
    engine_outputs: bool = True
    threads_per_engine: bool = False
    cuda_graphs: bool = False
    native_async: bool = False
    throughput_engines: bool = False
    precisions: tuple[str, ...] = ("f32",)
    precision_note: str = ""

    def accepts(self, device: str) -> bool:
        """Whether a context binds memory on ``device`` (``"cpu"``, ``"cuda:0"``...)."""
        return device in self.memory


def common_memory(capabilities: Sequence[Capabilities]) -> tuple[str, ...]:
    """The devices whose memory every one of ``capabilities`` binds (model tensors may feed
    any partition, so a runner accepts what all its engines accept)."""
    if not capabilities:
        return (HOST,)
    first = capabilities[0].memory
    return tuple(d for d in first if all(c.accepts(d) for c in capabilities[1:]))


class EngineContext(Protocol):
    """Per-slot binding state of one engine. Used by one thread at a time."""

    def bind_input(
        self, name: str, address: int, data_type: DataType, shape: tuple[int, ...]
    ) -> None:
        """Bind host memory at ``address`` as input ``name`` (no copy)."""

    def bind_output(
        self, name: str, address: int, data_type: DataType, shape: tuple[int, ...]
    ) -> None:
        """Bind host memory at ``address`` as output ``name``; the engine writes it in place."""

    def bind_output_dynamic(
        self, name: str, address: int, data_type: DataType, capacity: tuple[int, ...]
    ) -> None:
        """Bind memory at ``address`` with room for ``capacity`` (a shape; only its
        element count matters) as output ``name``, whose shape depends on the data. After
        :meth:`run` the result sits C-contiguously at the start of that memory when it fits
        (the engine writes it there, or copies it there: the backend's docstring says which);
        when it does not fit, the memory's contents are unspecified."""

    def run(self) -> None:
        """Run the graph on the bound buffers, without holding the GIL. Raises on failure
        (a data-dependent output too big for its memory is no failure: see
        :meth:`produced_shape`)."""

    def start(self, done: Callable[[BaseException | None], None]) -> None:
        """Start a run on the bound buffers and return at once; ``done(None)`` (or
        ``done(error)``) is called on an engine thread when it ends. Only where
        :attr:`Capabilities.native_async` is declared; one run per context at a time."""

    def produced_shape(self, name: str) -> tuple[int, ...]:
        """The shape the last :meth:`run` produced for data-dependent output ``name``."""

    def call_target(self) -> tuple[Any, tuple[Any, ...]]:
        """``(callable, args)`` that runs the bound graph: the engine's C entry point where
        :attr:`Capabilities.raw_call` says so, else ``(self.run, ())``."""

    def order_after(self, streams: tuple[int, ...]) -> None:
        """From now on, make every run first wait (on the GPU, no host wait) for the work
        queued at that moment on each CUDA stream in ``streams`` (the producers of the
        memory bound); replaces the streams given before. Called when the binding changes,
        only where :attr:`Capabilities.stream` is declared."""

    def close(self) -> None:
        """Release the binding state."""


class Engine(Protocol):
    """One partition loaded on one engine."""

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def input_names(self) -> tuple[str, ...]: ...

    @property
    def output_names(self) -> tuple[str, ...]: ...

    def new_context(self) -> EngineContext:
        """A fresh binding context (one per execution slot)."""

    def close(self) -> None:
        """Release the engine's session."""


class Backend(Protocol):
    """An inference engine family (ONNX Runtime CPU/CUDA, OpenVINO)."""

    @property
    def name(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def capabilities(self) -> Capabilities:
        """What the engines this backend loads declare (read before loading)."""

    def load(self, partition: Partition, num_threads: int) -> Engine:
        """Compile ``partition`` for this engine. Raises ModelLoadError/UnsupportedError."""
