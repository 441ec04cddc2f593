"""The backend interface: what the runner needs from an inference engine.

A backend turns one compiled :class:`~copyless.model.Partition` into an :class:`Engine`;
an engine hands out :class:`EngineContext` objects, one per execution slot. A context holds
the engine's binding state (an ONNX Runtime ``IOBinding``, an OpenVINO ``InferRequest``), so
buffers bound once stay bound across runs: the runner rebinds only what changed.

Binding is by address: the runner passes the address, element type and shape of memory it
has already validated, and the engine reads and writes that memory in place (zero-copy).
"""

from __future__ import annotations

from typing import Protocol

from ..model import Partition
from ..types import DataType


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

    def produced_shape(self, name: str) -> tuple[int, ...]:
        """The shape the last :meth:`run` produced for data-dependent output ``name``."""

    def close(self) -> None:
        """Release the binding state."""


class Engine(Protocol):
    """One partition loaded on one engine."""

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

    def load(self, partition: Partition, num_threads: int) -> Engine:
        """Compile ``partition`` for this engine. Raises ModelLoadError/UnsupportedError."""
