"""Validating a call's tensors against the model, once, and remembering how to bind them.

A :class:`CallPlan` says for each model tensor where its bytes are for this call:

* ``DIRECT``: a HW-view tensor (or N contiguous HW-view frames) bound to the engine in place.
* ``CONVERT``: CPU-view tensor(s), converted by ``copyless.layout`` into the slot's HW staging
  buffer (inputs) or from it (outputs). One conversion pass; a gather copy first when
  several per-frame tensors make up the batch.
* ``GATHER``: HW-view frames that are not contiguous, copied into / out of staging.
* ``DYNAMIC``: an output whose shape depends on the data: one tensor (the same in every
  row) holds the whole batch's result, C-contiguously at its start; its info names the
  capacity. Bound in place when its dtype is the HW view's (the backend says whether the
  engine writes it there or copies it there), else staged and converted.

Each tensor's memory must be on a device the runner's engines bind (``memory``: ``"cpu"``,
``"cuda:0"``...); device memory is bound only DIRECT (no conversion on the host), and the
producer streams device tensors carry are listed in ``CallPlan.waits``.

Plans are cached by the identity of the tensors (VART-ML's NpuTensor caching): a loop that
reuses its tensors validates them once. A plan refers to its tensors weakly: a cached plan
never keeps a released tensor (its memory, its fd) alive; the call that uses a plan holds
its tensors itself (the caller's lists, or the async job).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..memory import NpuTensor
from ..model import TensorSpec
from ..types import MemoryLayout, NpuTensorInfo, StatusCode, TensorError, TensorType

Refs = tuple["weakref.ref[NpuTensor]", ...]


def _refs(tensors: Sequence[NpuTensor]) -> Refs:
    return tuple(weakref.ref(t) for t in tensors)


def live(refs: Refs) -> tuple[NpuTensor, ...] | None:
    """The tensors, or None when one of them has been released."""
    tensors = tuple(r() for r in refs)
    if any(t is None for t in tensors):
        return None
    return tensors  # type: ignore[return-value]


def _strong(refs: Refs) -> tuple[NpuTensor, ...]:
    tensors = live(refs)
    if tensors is None:
        raise TensorError("a tensor of this call was released while the call was planned")
    return tensors

logger = logging.getLogger(__name__)

DIRECT, CONVERT, GATHER, DYNAMIC = 0, 1, 2, 3


def batch_axis(info: NpuTensorInfo) -> int:
    """Position of the batch (logical dim 0) in a view's physical shape."""
    layout = info.memory_layout
    if layout in (MemoryLayout.HCWNC4, MemoryLayout.HCWNC8, MemoryLayout.HCWNC16):
        return 3
    if layout is MemoryLayout.GENERIC and info.memory_layout_order:
        return info.memory_layout_order.index(0)
    return 0


def frame_shape(info: NpuTensorInfo) -> tuple[int, ...]:
    """The view's shape for one frame (batch dim 1)."""
    if not info.shape:
        return info.shape
    axis = batch_axis(info)
    shape = list(info.shape)
    shape[axis] = 1
    return tuple(shape)


@dataclass(frozen=True, slots=True)
class Bind:
    kind: int
    spec: TensorSpec
    view: TensorType
    refs: Refs
    address: int = 0  # DIRECT: first byte of the bound batch

    @property
    def tensors(self) -> tuple[NpuTensor, ...]:
        return _strong(self.refs)

    @property
    def info(self) -> NpuTensorInfo:
        return self.spec.hw if self.view is TensorType.HW else self.spec.cpu


@dataclass(frozen=True, slots=True)
class CallPlan:
    inputs: tuple[Bind, ...]
    outputs: tuple[Bind, ...]
    frames: int
    in_ranges: tuple[tuple[int, int], ...]
    out_ranges: tuple[tuple[int, int], ...]
    converted_bytes: int
    staged_inputs: tuple[Bind, ...]  # inputs needing a conversion or gather per call
    staged_outputs: tuple[Bind, ...]  # outputs needing a conversion, scatter or copy
    synced_refs: Refs  # tensors whose sync_buffer() does real work
    refs: Refs  # every tensor of the call
    waits: tuple[int, ...] = ()  # producer CUDA streams the engines must wait for

    @property
    def direct(self) -> bool:
        """Every tensor bound in place: nothing to convert, gather, scatter or sync."""
        return not (self.staged_inputs or self.staged_outputs or self.synced_refs)

    @property
    def synced(self) -> tuple[NpuTensor, ...]:
        return _strong(self.synced_refs) if self.synced_refs else ()

    @property
    def tensors(self) -> tuple[NpuTensor, ...] | None:
        """Every tensor of the call, or None when one has been released."""
        return live(self.refs)


class BindError(Exception):
    """Internal: a call's tensors do not fit the model; carries the status to return."""

    def __init__(self, status: StatusCode, message: str) -> None:
        super().__init__(message)
        self.status = status


def build_plan(
    in_specs: Sequence[TensorSpec],
    out_specs: Sequence[TensorSpec],
    batch_size: int,
    inputs: Any,
    outputs: Any,
    memory: tuple[str, ...] = ("cpu",),
) -> CallPlan:
    """Validate ``inputs``/``outputs`` ([batch][tensor] lists) for a runner whose engines
    bind memory on the devices ``memory`` names. Raises :class:`BindError`."""
    in_frames = _frames(inputs, len(in_specs), batch_size, StatusCode.INVALID_INPUT, "inputs")
    out_frames = _frames(outputs, len(out_specs), batch_size, StatusCode.INVALID_OUTPUT, "outputs")
    _check_writable(out_frames)
    if len(in_frames) != len(out_frames):
        raise BindError(
            StatusCode.INVALID_OUTPUT,
            f"{len(in_frames)} input frame(s) but {len(out_frames)} output frame(s)",
        )
    frames = len(in_frames)
    in_binds = tuple(
        _placed(spec, [row[i] for row in in_frames], StatusCode.INVALID_INPUT, batch_size, memory)
        for i, spec in enumerate(in_specs)
    )
    out_binds = tuple(
        _placed(spec, [row[i] for row in out_frames], StatusCode.INVALID_OUTPUT, batch_size, memory)
        for i, spec in enumerate(out_specs)
    )
    converted = sum(
        b.info.size_in_bytes for b in in_binds + out_binds if b.kind in (CONVERT, GATHER)
    )
    return CallPlan(
        in_binds,
        out_binds,
        frames,
        tuple(_ranges(in_binds)),
        tuple(_ranges(out_binds)),
        converted,
        tuple(b for b in in_binds if b.kind != DIRECT),
        tuple(b for b in out_binds if b.kind != DIRECT),
        _refs(
            [
                t
                for b in in_binds + out_binds
                for t in b.tensors
                if t.needs_sync
            ]
        ),
        _refs([t for b in in_binds + out_binds for t in b.tensors]),
        _producer_streams(in_binds),
    )


def _check_writable(out_frames: list[list[NpuTensor]]) -> None:
    """Outputs are written in place: an INPUT tensor over read-only memory (a PROT_READ
    mmap, a read-only array or device buffer) in an output position is refused. Bound in
    place, the engine's write was a segfault (found by fuzz/fuzz_runner.py)."""
    for b, row in enumerate(out_frames):
        for t, tensor in enumerate(row):
            device = tensor.device_memory
            readonly = device.readonly if device is not None else (
                not tensor.bytes_view().flags.writeable)  # fmt: skip
            if readonly:
                raise BindError(
                    StatusCode.INVALID_OUTPUT,
                    f"outputs[{b}][{t}] {tensor.info.describe()} is read-only memory",
                )


def _frames(
    rows: Any, width: int, batch_size: int, status: StatusCode, what: str
) -> list[list[NpuTensor]]:
    if not isinstance(rows, (list, tuple)) or not rows:
        raise BindError(status, f"{what} must be a non-empty [batch][tensor] list")
    if len(rows) > batch_size:
        raise BindError(status, f"{len(rows)} {what} frames exceed the batch size {batch_size}")
    frames: list[list[NpuTensor]] = []
    for b, row in enumerate(rows):
        if not isinstance(row, (list, tuple)) or len(row) != width:
            got = len(row) if isinstance(row, (list, tuple)) else type(row).__name__
            raise BindError(status, f"{what}[{b}] must list {width} tensor(s), got {got}")
        for t, tensor in enumerate(row):
            if not isinstance(tensor, NpuTensor):
                raise BindError(
                    status, f"{what}[{b}][{t}] is a {type(tensor).__name__}, not an NpuTensor"
                )
            if tensor.closed:
                raise BindError(status, f"{what}[{b}][{t}] {tensor.info.describe()} is closed")
        frames.append(list(row))
    return frames


def _placed(
    spec: TensorSpec,
    tensors: list[NpuTensor],
    status: StatusCode,
    batch_size: int,
    memory: tuple[str, ...],
) -> Bind:
    """:func:`_bind`, after checking each tensor's device; device memory binds DIRECT only."""
    for tensor in tensors:
        if tensor.device not in memory:
            raise BindError(
                status,
                f"tensor {spec.name!r}: memory on {tensor.device}, but this runner binds "
                f"memory on {', '.join(memory)} only",
            )
    bind = _bind(spec, tensors, status, batch_size)
    if bind.kind != DIRECT and any(t.device_memory is not None for t in tensors):
        why = {
            CONVERT: "a CPU-view tensor is converted on the host: use the HW view",
            GATHER: "its frames are not one contiguous batch",
            DYNAMIC: "a data-dependent output is copied on the host: pass host memory",
        }[bind.kind]
        raise BindError(status, f"tensor {spec.name!r} on {tensors[0].device}: {why}")
    return bind


def _producer_streams(binds: tuple[Bind, ...]) -> tuple[int, ...]:
    streams: dict[int, None] = {}
    for bind in binds:
        for tensor in bind.tensors:
            memory = tensor.device_memory
            if memory is not None and memory.stream is not None:
                streams[memory.stream] = None
    return tuple(streams)


def _bind(spec: TensorSpec, tensors: list[NpuTensor], status: StatusCode, batch_size: int) -> Bind:
    first = tensors[0].info
    view = first.tensor_type
    expected = spec.hw if view is TensorType.HW else spec.cpu
    if spec.dynamic:
        _check_dynamic(spec, tensors, expected, status)
        return Bind(DYNAMIC, spec, view, _refs(tensors[:1]), tensors[0].address)
    for tensor in tensors:
        _check_view(tensor.info, expected, status)
    whole = tensors[0].info.shape == expected.shape
    if len(tensors) > 1 and whole and batch_size > 1:
        raise BindError(status, f"{spec.name!r}: per-frame tensors must have batch 1")
    if view is TensorType.CPU:
        return Bind(CONVERT, spec, view, _refs(tensors))
    if not _packed(tensors[0].info):
        return Bind(GATHER, spec, view, _refs(tensors))
    if whole:
        return Bind(DIRECT, spec, view, _refs(tensors), tensors[0].address)
    if len(tensors) == batch_size and batch_axis(expected) == 0 and _contiguous(tensors):
        return Bind(DIRECT, spec, view, _refs(tensors), tensors[0].address)
    return Bind(GATHER, spec, view, _refs(tensors))


def _same_view(info: NpuTensorInfo, expected: NpuTensorInfo) -> bool:
    return (
        info.data_type is expected.data_type
        and info.memory_layout is expected.memory_layout
        and info.memory_layout_order == expected.memory_layout_order
    )


def _check_view(info: NpuTensorInfo, expected: NpuTensorInfo, status: StatusCode) -> None:
    if not (_same_view(info, expected) and info.shape in (expected.shape, frame_shape(expected))):
        raise BindError(
            status,
            f"tensor {info.describe()} does not match the model's "
            f"{expected.tensor_type.name} view {expected.describe()}",
        )


def _check_dynamic(
    spec: TensorSpec, tensors: list[NpuTensor], expected: NpuTensorInfo, status: StatusCode
) -> None:
    """A data-dependent output: one packed tensor of the view's dtype and layout whose dims
    equal the view's except the data-dependent ones (any capacity there)."""
    info = tensors[0].info
    fixed = [i for i in range(len(expected.shape)) if i not in spec.dynamic_dims]
    fits = (
        _same_view(info, expected)
        and info.strides is None
        and len(info.shape) == len(expected.shape)
        and all(info.shape[i] == expected.shape[i] for i in fixed)
    )
    if not fits:
        raise BindError(
            status,
            f"tensor {info.describe()} does not fit the model's {expected.tensor_type.name} "
            f"view {expected.describe()}: same dtype and layout, packed, and the same dims "
            f"except the data-dependent ones {list(spec.dynamic_dims)} (a capacity there)",
        )
    if any(t is not tensors[0] for t in tensors):
        raise BindError(
            status,
            f"output {spec.name!r} depends on the data: one tensor holds the whole batch's "
            "result; pass the same tensor in every row",
        )


def _packed(info: NpuTensorInfo) -> bool:
    if info.strides is None:
        return True
    expected, step = [], info.data_type.itemsize
    for dim in reversed(info.shape):
        expected.append(step)
        step *= dim
    return tuple(reversed(expected)) == info.strides


def _contiguous(tensors: list[NpuTensor]) -> bool:
    step = tensors[0].info.size_in_bytes
    base = tensors[0].address
    return all(t.address == base + i * step for i, t in enumerate(tensors))


def _ranges(binds: tuple[Bind, ...]) -> list[tuple[int, int]]:
    ranges = []
    for bind in binds:
        for tensor in bind.tensors:
            ranges.append((tensor.address, tensor.address + tensor.info.size_in_bytes))
    return ranges


def overlaps(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    """True when any byte range of ``a`` overlaps one of ``b``."""
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)
