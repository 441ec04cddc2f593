"""OpenVINO outputs whose shape depends on the data, for one ``InferRequest``.

OpenVINO writes such an output straight into the caller's memory when the port's partial
shape bounds every dynamic dim (``[2,..12]`` for NonZero of a ``[3,4]`` input) and the
caller's capacity holds that bound: the port gets an ``openvino.Tensor`` over the caller's
memory shaped as the bound, and each run resizes it (within its capacity) to the shape
produced, so the result is C-contiguous at the start of the memory, without a copy.

Otherwise (no bound, a dynamic rank, a rank other than the capacity's, or a capacity below
the bound) the port keeps a tensor OpenVINO owns and the result is **copied** into the
caller's memory after each run, the produced bytes only, when they fit. Never letting a
result outgrow a caller's tensor matters: OpenVINO 2026.4 raises for that with several
engine threads, but with one it silently keeps the previous run's output and can later
abort the process ("pure virtual method called").
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any

from ..types import DataType
from ._openvino_tensors import host_tensor, owned_tensor


@dataclass(frozen=True, slots=True)
class _Capacity:
    """Where a caller bound a data-dependent output, and how many bytes it holds."""

    address: int
    nbytes: int  # the caller's capacity


class DynamicOutputs:
    """The data-dependent outputs bound on one request, and the shapes its last run made."""

    __slots__ = ("_bound", "_ports", "_request", "shapes")

    def __init__(self, request: Any, ports: dict[str, int]) -> None:
        self._request = request
        self._ports = ports
        self._bound: dict[str, _Capacity] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self._bound)

    def bind(self, name: str, address: int, data_type: DataType, capacity: tuple[int, ...]) -> None:
        """Bind the caller's memory in place where the port allows it, else an owned tensor."""
        port = self._ports[name]
        nbytes = math.prod(capacity) * data_type.itemsize
        shape = fitting_shape(capacity, self._request.model_outputs[port].get_partial_shape())
        tensor = None
        if shape is not None and nbytes > 0:
            tensor = host_tensor(address, data_type, shape)
            try:
                self._request.set_output_tensor(port, tensor)
            except RuntimeError:  # OpenVINO found the shape incompatible after all
                tensor = None
        if tensor is None:
            self._own(port)
        self._bound[name] = _Capacity(address, nbytes)

    def unbind(self, name: str) -> None:
        """``name`` is bound to fixed memory now (a static plan took the context)."""
        self._bound.pop(name, None)

    def collect(self) -> None:
        """After a run: record the shapes; copy out the results OpenVINO holds that fit."""
        for name, bound in self._bound.items():
            tensor = self._request.get_output_tensor(self._ports[name])
            # The numpy view gives shape and address in microseconds (iterating an
            # openvino.Shape takes over 100 us).
            view = tensor.data
            self.shapes[name] = view.shape
            produced = int(tensor.byte_size)
            if 0 < produced <= bound.nbytes:
                source = int(view.ctypes.data)
                if source != bound.address:  # not the caller's memory: OpenVINO's own
                    ctypes.memmove(bound.address, source, produced)

    def _own(self, port: int) -> None:
        self._request.set_output_tensor(port, owned_tensor(self._request.model_outputs[port]))


def fitting_shape(capacity: tuple[int, ...], partial: Any) -> tuple[int, ...] | None:
    """The port's upper-bound shape when it is fully bounded and fits in ``capacity`` (same
    rank, no more elements, each dynamic dim's bound within the caller's), else None."""
    if partial.rank.is_dynamic or partial.rank.get_length() != len(capacity):
        return None
    dims = []
    for want, dim in zip(capacity, partial, strict=True):
        upper = int(dim.get_max_length())
        if upper < 0 or (dim.is_dynamic and upper > want):
            return None
        dims.append(upper)
    return tuple(dims) if math.prod(dims) <= math.prod(capacity) else None


class Aliases:
    """Outputs OpenVINO passes through from an input (see :mod:`._openvino_ports`): it writes
    nothing into the caller's output memory, so each run ends by copying the input there."""

    __slots__ = ("_bound", "_pairs")

    def __init__(self, pairs: dict[str, str]) -> None:
        self._pairs = pairs  # output name -> input name
        self._bound: dict[str, tuple[int, int, tuple[int, ...]]] = {}  # address, nbytes, shape

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def note(self, name: str, address: int, data_type: DataType, shape: tuple[int, ...]) -> None:
        """Where ``name`` (an input or output) is bound now."""
        if self._pairs:
            self._bound[name] = (address, math.prod(shape) * data_type.itemsize, shape)

    def copy(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """After a run: each aliased input into its output (a data-dependent output gets the
        input's shape as the one produced, when it fits)."""
        for output, source in self._pairs.items():
            if output not in self._bound or source not in self._bound:
                continue
            to, room, _ = self._bound[output]
            start, nbytes, shape = self._bound[source]
            if nbytes > room:
                raise RuntimeError(f"output {output!r} needs {nbytes} bytes, has {room}")
            if to != start and nbytes:
                ctypes.memmove(to, start, nbytes)
            if output in shapes:
                shapes[output] = shape
