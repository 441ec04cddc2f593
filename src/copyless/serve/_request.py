"""An inference request and its response as both protocols carry them, once parsed.

The REST and gRPC layers turn their wire formats into an :class:`InferRequest` (each input
with its bytes as a flat numpy array over the request's own buffer, or the name of a
shared-memory region) and an :class:`InferResponse` back into theirs; the model checks and
runs it (:mod:`._model`). Nothing here touches the network.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._access import UNIDENTIFIED, Client
from ._errors import RequestError
from ._tensors import DATATYPES, ServedTensor, numpy_dtype

__all__ = [
    "InferRequest",
    "InferResponse",
    "InputTensor",
    "OutputWish",
    "RegionRange",
    "ResponseTensor",
    "array_from_bytes",
    "array_from_values",
    "schedule_parameters",
]


@dataclass(frozen=True, slots=True)
class RegionRange:
    """``byte_size`` bytes at ``offset`` of the registered region ``region``."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass(frozen=True, slots=True)
class InputTensor:
    """One input: ``data`` (a flat array of the datatype's numpy dtype, no copy of the
    request's bytes where they were binary), ``values`` (numbers not yet converted: JSON
    lists, or a protobuf repeated field; converted once the shape is checked), ``shm`` (a
    region range) or ``elements`` (a ``BYTES`` tensor's elements: encoded images): exactly
    one of them."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray | None = None
    shm: RegionRange | None = None
    values: object | None = None
    elements: tuple[bytes | memoryview, ...] | None = None


@dataclass(frozen=True, slots=True)
class OutputWish:
    """An output the client asks for: ``binary`` (REST: raw bytes after the JSON header;
    None: the request's default) or into ``shm``."""

    name: str
    binary: bool | None = None
    shm: RegionRange | None = None


@dataclass(frozen=True, slots=True)
class InferRequest:
    """``outputs`` None: every output of the model, in the request's default form;
    ``client``: who sent it (whose regions it may name); ``priority`` (0: the model's
    default level) and ``timeout_us`` (0: none): its queue policy parameters; ``nbytes``: its
    size on the wire."""

    model: str
    version: str = ""
    id: str = ""
    inputs: tuple[InputTensor, ...] = ()
    outputs: tuple[OutputWish, ...] | None = None
    binary_outputs: bool = False
    client: Client = UNIDENTIFIED
    priority: int = 0
    timeout_us: int = 0
    nbytes: int = 0  # its body's or message's size, for the metrics

    @property
    def uses_regions(self) -> bool:
        return any(t.shm is not None for t in self.inputs) or any(
            w.shm is not None for w in self.outputs or ())


@dataclass(slots=True)
class ResponseTensor:
    """One output of a response: ``data`` (C-contiguous, the response's shape) or, for an
    output written into shared memory, ``shm`` and no data."""

    tensor: ServedTensor
    shape: tuple[int, ...]
    data: np.ndarray | None
    wish: OutputWish


@dataclass(slots=True)
class InferResponse:
    model: str
    version: str
    id: str
    outputs: list[ResponseTensor] = field(default_factory=list)


#: the numpy type a protobuf repeated field's values arrive as, by the datatype's kind
_PROTO_TYPES = {"b": np.bool_, "i": np.int64, "u": np.uint64, "f": np.float64}


def schedule_parameters(params: dict[str, object], where: str) -> tuple[int, int]:
    """``(priority, timeout_us)`` from a request's parameters (both protocols name them
    alike, Triton's schedule-policy extension); one clear error for anything else."""
    found = []
    for key in ("priority", "timeout"):
        value = params.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RequestError.invalid(f"{where}: parameter {key!r} must be an integer >= 0"
                                       f"{' (microseconds)' if key == 'timeout' else ''}, "
                                       f"got {value!r}")  # fmt: skip
        found.append(value)
    return found[0], found[1]


def _dtype(datatype: str, where: str) -> np.dtype[np.generic]:
    dtype = numpy_dtype(datatype) if isinstance(datatype, str) else None
    if dtype is None:
        raise RequestError.invalid(f"{where}: datatype {datatype!r} is not one a copyless model "
                                 f"takes ({', '.join(DATATYPES.values())})")  # fmt: skip
    return dtype


def array_from_bytes(raw: bytes | bytearray | memoryview, datatype: str,
                     where: str) -> np.ndarray:  # fmt: skip
    """A flat read-only view of ``raw`` as ``datatype``'s elements (no copy)."""
    dtype = _dtype(datatype, where)
    if len(raw) % dtype.itemsize:
        raise RequestError.invalid(f"{where}: {len(raw)} bytes are not a whole number of "
                                 f"{datatype} elements")  # fmt: skip
    return np.frombuffer(raw, dtype=dtype)


def array_from_values(values: object, datatype: str, where: str,
                      count: int | None = None) -> np.ndarray:  # fmt: skip
    """A flat array of JSON values (numbers, booleans for BOOL; nested lists row-major) or
    of a protobuf repeated field as ``datatype``; anything else is one clear error. ``count``:
    the elements expected, checked on a repeated field before any is converted."""
    dtype = _dtype(datatype, where)
    kind = dtype.kind
    if not isinstance(values, list):  # a protobuf repeated field: flat, typed by the schema
        size = len(values)  # type: ignore[arg-type]
        if count is not None and size != count:
            raise RequestError.invalid(f"{where}: {size} values given; its shape holds {count}")
        values = np.fromiter(values, _PROTO_TYPES[kind], count=size)  # type: ignore[call-overload]
    try:
        array = np.asarray(values)
    except (ValueError, TypeError, RecursionError) as exc:  # ragged or too deep
        raise RequestError.invalid(f"{where}: data is not a rectangular array: {exc}") from None
    if array.dtype == object or array.dtype.kind not in "biuf":
        raise RequestError.invalid(f"{where}: data must hold only numbers"
                                 f"{' or booleans' if kind == 'b' else ''}")  # fmt: skip
    if kind == "b" and array.dtype.kind != "b":
        raise RequestError.invalid(f"{where}: BOOL data must be true/false")
    if kind in "iu" and array.dtype.kind == "f":
        raise RequestError.invalid(f"{where}: {datatype} data must be integers")
    try:
        converted = array.astype(dtype, casting="unsafe").reshape(-1)
    except (ValueError, OverflowError) as exc:
        raise RequestError.invalid(f"{where}: {exc}") from None
    if kind in "iu" and array.size and not np.array_equal(converted, array.reshape(-1)):
        info = np.iinfo(dtype.name)
        raise RequestError.invalid(f"{where}: {datatype} values lie in [{info.min}, {info.max}]")
    return converted
