"""Conversion plans: two views and quant params, validated once, run many times.

Element semantics (one rule per pair of types; the C kernel implements exactly these):

=================  =======================================================================
float -> integer   quantize ``q = clamp(round(x / scale) + zero_point)``: ``x / scale`` in
                   float32 (``scale`` taken as float32, as ONNX QuantizeLinear), rounded per
                   ``QuantParameters.rounding_mode`` (UNKNOWN = nearest even), saturated to
                   the integer range; NaN quantizes to ``zero_point``. Needs ``quant``.
integer -> float   dequantize ``x = (q - zero_point) * scale`` in float32, then rounded to the
                   float destination. Needs ``quant`` (``QuantParameters(1.0)`` is a plain
                   cast). Exact for integers of up to 24 bits.
float -> float     IEEE cast, round to nearest even; fp16 overflows to inf, NaN stays NaN.
integer -> integer cast, exact when the value fits, else saturated (300 -> uint8 is 255,
                   -1 -> uint64 is 0). int64/uint64 never go through a double.
bool               ``x != 0`` into BOOLEAN; ``0``/``1`` out of it. Never quantized.
=================  =======================================================================

``quant`` given for any pair other than float <-> integer is a :class:`LayoutError`
(it is ambiguous there), as is a ``zero_point`` outside the integer type's range.
Channel padding written into a destination is ``zero_point`` for a quantized integer
destination, else 0.
"""

from __future__ import annotations

import enum
import functools
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..types import DataType, LayoutError, NpuTensorInfo, QuantParameters, RoundingMode
from . import _kernels
from ._nest import Nest, PadMode, build_nest

logger = logging.getLogger(__name__)

#: DataType -> the C kernel's type code.
_TYPE_CODE: dict[DataType, int] = {
    DataType.BOOLEAN: 0,
    DataType.INT8: 1,
    DataType.UINT8: 2,
    DataType.INT16: 3,
    DataType.UINT16: 4,
    DataType.BF16: 5,
    DataType.FP16: 6,
    DataType.INT32: 7,
    DataType.UINT32: 8,
    DataType.FLOAT32: 9,
    DataType.INT64: 10,
    DataType.UINT64: 11,
}


class Op(enum.IntEnum):
    """The element operation of a plan (values match the C kernel)."""

    COPY = 0
    FCAST = 1
    QUANT = 2
    DEQUANT = 3
    ICAST = 4
    FTOBOOL = 5


@dataclass(frozen=True, slots=True)
class ElementRule:
    """What happens to each element: the operation and its parameters."""

    op: Op
    scale: float = 1.0
    zero_point: int = 0
    toward_zero: bool = False
    pad_value: int = 0


def element_rule(
    src: NpuTensorInfo, dst: NpuTensorInfo, quant: QuantParameters | None
) -> ElementRule:
    """The element operation from ``src``'s type to ``dst``'s; raises LayoutError."""
    s, d = src.data_type, dst.data_type
    if DataType.UNKNOWN in (s, d):
        raise _fail(src, dst, "a view of DataType.UNKNOWN has no elements to convert")
    mixed = (s.is_float and d.is_integer) or (s.is_integer and d.is_float)
    if mixed and quant is None:
        side = dst if d.is_integer else src
        raise _fail(
            src,
            dst,
            f"missing quant params for the integer view {side.describe()} "
            "(QuantParameters(1.0) casts)",
        )
    if not mixed and quant is not None:
        raise _fail(src, dst, "quant params apply only between a float and an integer view")
    if quant is not None:
        integer = d if d.is_integer else s
        info = np.iinfo(integer.to_numpy())
        if not info.min <= quant.zero_point <= info.max:
            raise _fail(src, dst, f"zero_point {quant.zero_point} outside {integer.name}")
        _check_kernel_quant(src, dst, quant)
        op = Op.QUANT if d.is_integer else Op.DEQUANT
        return ElementRule(
            op,
            quant.scale,
            quant.zero_point,
            quant.rounding_mode is RoundingMode.ROUND_TOWARD_ZERO,
            quant.zero_point if op is Op.QUANT else 0,
        )
    if s is d:
        return ElementRule(Op.COPY)
    if s.is_float and d.is_float:
        return ElementRule(Op.FCAST)
    if s is DataType.BOOLEAN and d.is_float:
        return ElementRule(Op.DEQUANT)  # (q - 0) * 1.0
    if s.is_float:
        return ElementRule(Op.FTOBOOL)
    return ElementRule(Op.ICAST)


def _check_kernel_quant(src: NpuTensorInfo, dst: NpuTensorInfo, quant: QuantParameters) -> None:
    """What the C kernel assumes of ``quant`` (layout/_kernels.c, plan_init): the scale is a
    positive finite float32, the zero point an int64."""
    with np.errstate(over="ignore", under="ignore"):
        scale32 = float(np.float32(quant.scale))
    if not 0.0 < scale32 < math.inf:
        raise _fail(
            src, dst, f"scale {quant.scale} is {scale32} in float32 (the kernels' precision)"
        )
    if not _INT64_MIN <= quant.zero_point <= _INT64_MAX:
        raise _fail(src, dst, f"zero_point {quant.zero_point} does not fit in int64")


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _fail(src: NpuTensorInfo, dst: NpuTensorInfo, why: str) -> LayoutError:
    return LayoutError(f"cannot convert {src.describe()} -> {dst.describe()}: {why}")


class Plan:
    """A validated conversion from the ``src_info`` view to the ``dst_info`` view.

    Build with :func:`plan_for` (cached). :meth:`run` converts one buffer into another in a
    single pass of the C kernel; that conversion is the only copy. Reuse a plan for every
    call with the same views: it holds no buffers and is safe to run from many threads.
    """

    __slots__ = (
        "_dst_dtype",
        "_dst_shape",
        "_kernel",
        "_src_dtype",
        "_src_shape",
        "dst_info",
        "nest",
        "quant",
        "rule",
        "src_info",
    )

    def __init__(
        self, src_info: NpuTensorInfo, dst_info: NpuTensorInfo, quant: QuantParameters | None
    ) -> None:
        self.src_info = src_info
        self.dst_info = dst_info
        self.quant = quant
        self.rule = element_rule(src_info, dst_info, quant)
        self.nest: Nest = build_nest(src_info, dst_info)
        self._src_dtype = src_info.numpy_dtype
        self._dst_dtype = dst_info.numpy_dtype
        self._src_shape = src_info.shape
        self._dst_shape = dst_info.shape
        self._kernel = self._build_kernel()
        logger.debug("plan %s", self)

    def _build_kernel(self) -> _kernels.Plan:
        nest, rule = self.nest, self.rule
        pad = np.array(rule.pad_value).astype(self._dst_dtype).tobytes()
        pad_dim = nest.index("pad") if nest.pad_mode is not PadMode.NONE else -1
        return _kernels.Plan(
            [d.extent for d in nest.dims],
            [d.src_stride for d in nest.dims],
            [d.dst_stride for d in nest.dims],
            _TYPE_CODE[self.src_info.data_type],
            _TYPE_CODE[self.dst_info.data_type],
            int(rule.op),
            rule.scale,
            rule.zero_point,
            rule.toward_zero,
            pad_dim,
            nest.index("block"),
            int(nest.pad_mode),
            nest.group,
            nest.channels,
            pad,
            self.src_info.size_in_bytes,
            self.dst_info.size_in_bytes,
        )

    @property
    def kernel(self) -> str:
        """Which inner kernel runs: ``"copy"``, ``"specialised"``, ``"generic"``, or
        ``"fused pixels"`` (float32 planes quantized straight into 4-byte pixels)."""
        return self._kernel.kernel

    def run(self, src: Any, dst: Any) -> None:
        """Convert ``src``'s elements into ``dst``'s memory (one pass, no temporaries).

        Each of ``src``/``dst`` is either a numpy array of its view's dtype and shape, or
        raw bytes holding the view (a flat ``uint8`` array such as
        :meth:`NpuTensor.bytes_view`, a ``bytearray``, an ``mmap``): C-contiguous, at least
        ``size_in_bytes`` long, ``dst`` writable, the two not overlapping. Raises
        :class:`LayoutError` otherwise.
        """
        # A numpy array of another shape/dtype must be raw bytes, never reinterpreted.
        if isinstance(src, np.ndarray) and (
            src.shape != self._src_shape or src.dtype != self._src_dtype
        ):
            _check_raw(src, self.src_info)
        if isinstance(dst, np.ndarray) and (
            dst.shape != self._dst_shape or dst.dtype != self._dst_dtype
        ):
            _check_raw(dst, self.dst_info)
        try:
            self._kernel.run(src, dst)
        except (ValueError, TypeError, BufferError) as exc:
            raise _fail(self.src_info, self.dst_info, str(exc)) from exc

    def __repr__(self) -> str:
        dims = ", ".join(
            f"{d.extent}:{d.src_stride}/{d.dst_stride}{d.role}" for d in self.nest.dims
        )
        return (
            f"<Plan {self.src_info.describe()} -> {self.dst_info.describe()} "
            f"{self.rule.op.name} [{dims}] pad={self.nest.pad_mode.name} {self.kernel}>"
        )


def _check_raw(array: np.ndarray[Any, Any], info: NpuTensorInfo) -> None:
    if array.dtype != np.uint8 or array.ndim != 1:
        raise LayoutError(
            f"{info.describe()}: got an array of {array.dtype} {list(array.shape)}; pass an "
            f"array of {info.numpy_dtype} {list(info.shape)} or flat uint8 bytes"
        )


@functools.lru_cache(maxsize=512)
def plan_for(
    src_info: NpuTensorInfo, dst_info: NpuTensorInfo, quant: QuantParameters | None = None
) -> Plan:
    """The (cached) :class:`Plan` converting ``src_info`` views into ``dst_info`` views.

    Raises :class:`LayoutError` for views of different logical tensors, a missing or
    meaningless ``quant``, and :class:`UnsupportedError` for layouts with no conversion.
    """
    return Plan(src_info, dst_info, quant)
