"""Metadata of the public API: tensor views, quantization parameters and job handles."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._enums import (
    DataType,
    MemoryLayout,
    RoundingMode,
    StatusCode,
    TensorDirection,
    TensorType,
)
from ._errors import LayoutError, TensorError


@dataclass(frozen=True, slots=True)
class NpuTensorInfo:
    """One view (CPU or HW) of a model tensor.

    ``shape`` is the physical shape of the view: for a HW view in a blocked layout it is the
    padded, reordered shape (HCWNC4 of a CPU NCHW ``[1,3,224,224]`` is ``[224,1,224,1,4]``).
    ``strides``, when given, are numpy-style byte strides of ``shape``; ``None`` means packed
    C order. ``memory_layout_order`` is the permutation of the CPU dims for ``GENERIC``.

    A model output whose shape depends on the data reports ``-1`` for each dim no bound is
    known for (an unknown rank reads ``(-1,)``); such an info is *unbounded*: ``size`` and
    ``size_in_bytes`` are ``-1`` and no tensor can be made of it until the caller replaces
    the ``-1`` dims with the capacity it wants (``dataclasses.replace(info, shape=...)``).

    Strides are byte steps of at least 1 (numpy's 0 and negative steps are refused: a
    broadcast view has a byte size far below its elements', a reversed one starts before
    its buffer), and an OUTPUT view's elements may not overlap one another (the engine
    would write one element over another).

    Raises :class:`~copyless.TensorError` (a ``ValueError``) for a dimension below -1, a
    stride count that does not match ``shape``, a stride below 1 or overlapping output
    elements, ``TypeError`` for a field of the wrong enum.
    """

    name: str
    data_type: DataType
    direction: TensorDirection
    tensor_type: TensorType
    memory_layout: MemoryLayout
    shape: tuple[int, ...]
    memory_layout_order: tuple[int, ...] = ()
    strides: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        # Lists are accepted for convenience; stored as tuples so infos stay hashable.
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(
            self, "memory_layout_order", tuple(int(d) for d in self.memory_layout_order)
        )
        if self.strides is not None:
            object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))
            if len(self.strides) != len(self.shape):
                raise TensorError(
                    f"tensor {self.name!r}: {len(self.strides)} strides for {len(self.shape)} dims"
                )
        if any(d < -1 for d in self.shape) or (-1 in self.shape and self.strides is not None):
            raise TensorError(f"tensor {self.name!r}: negative dimension in {self.shape}")
        for attr, enum_type in (
            ("data_type", DataType),
            ("direction", TensorDirection),
            ("tensor_type", TensorType),
            ("memory_layout", MemoryLayout),
        ):
            if not isinstance(getattr(self, attr), enum_type):
                raise TypeError(f"tensor {self.name!r}: {attr} must be a {enum_type.__name__}")
        if self.strides is not None:
            _check_strides(self, self.strides)

    @property
    def bounded(self) -> bool:
        """False when a dim is -1 (a data-dependent dim with no known bound)."""
        return -1 not in self.shape

    @property
    def size(self) -> int:
        """Number of elements of the view (padding included); -1 when unbounded."""
        if -1 in self.shape:
            return -1
        return math.prod(self.shape)

    @property
    def size_in_bytes(self) -> int:
        """Bytes the view's buffer must hold at least; -1 when unbounded."""
        if -1 in self.shape:
            return -1
        itemsize = self.data_type.itemsize
        if self.strides is None:
            return self.size * itemsize
        if self.size == 0:
            return 0
        last = sum((d - 1) * s for d, s in zip(self.shape, self.strides, strict=True))
        return last + itemsize

    @property
    def numpy_dtype(self) -> Any:
        """The numpy dtype of the elements."""
        return self.data_type.to_numpy()

    def with_shape(self, shape: tuple[int, ...]) -> NpuTensorInfo:
        """The same view with another (e.g. smaller batch) shape, packed."""
        return NpuTensorInfo(
            self.name,
            self.data_type,
            self.direction,
            self.tensor_type,
            self.memory_layout,
            tuple(shape),
            self.memory_layout_order,
            None,
        )

    def describe(self) -> str:
        """One line for error messages: name, view, layout, dtype, shape."""
        return (
            f"{self.name!r} {self.tensor_type.name} {self.memory_layout.name} "
            f"{self.data_type.name} {list(self.shape)}"
        )


def _check_strides(info: NpuTensorInfo, strides: tuple[int, ...]) -> None:
    """Strides of at least one byte; for an OUTPUT view, no element overlapping another."""
    if any(s < 1 for s in strides):
        raise TensorError(
            f"tensor {info.name!r}: strides {list(strides)} must be byte steps >= 1 "
            "(no broadcast (0) or reversed (negative) views)"
        )
    if info.direction is not TensorDirection.OUTPUT or info.data_type is DataType.UNKNOWN:
        return
    # Innermost first: each dim's step must clear everything the dims inside it span.
    span = info.data_type.itemsize
    for dim, stride in sorted((p for p in zip(info.shape, strides, strict=True)
                               if p[0] > 1), key=lambda p: p[1]):  # fmt: skip
        if stride < span:
            raise TensorError(
                f"tensor {info.name!r}: strides {list(strides)} make elements of shape "
                f"{list(info.shape)} overlap; an OUTPUT view needs each element its own bytes"
            )
        span = stride * (dim - 1) + span


@dataclass(frozen=True, slots=True)
class QuantParameters:
    """Affine quantization: ``q = clamp(round(x / scale) + zp)``, ``x = (q - zp) * scale``.

    Raises :class:`~copyless.LayoutError` (a ``ValueError``) for a scale that is not finite
    and positive.
    """

    scale: float
    zero_point: int = 0
    rounding_mode: RoundingMode = RoundingMode.ROUND_TO_NEAREST_EVEN

    def __post_init__(self) -> None:
        if not math.isfinite(self.scale) or self.scale <= 0.0:
            raise LayoutError(f"quantization scale must be finite and > 0, got {self.scale}")
        object.__setattr__(self, "zero_point", int(self.zero_point))


@dataclass(frozen=True, slots=True)
class JobHandle:
    """What ``execute_async`` returns. ``job_id`` 0 is never a valid job."""

    status: StatusCode
    job_id: int = 0

    @property
    def ok(self) -> bool:
        return self.status is StatusCode.SUCCESS and self.job_id > 0


#: The callback ``Runner.execute_async`` takes (VART-ML's callback overload): called once, on a
#: worker thread, with the finished job's handle. What it returns is ignored; what it raises
#: is logged and reported by ``Runner.wait``.
ExecuteAsyncCallback = Callable[[JobHandle], None]
