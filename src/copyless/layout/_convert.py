"""The public conversion entry points: :func:`convert` on tensors, :func:`convert_array`
on raw arrays. Both run one cached :class:`~copyless.layout._plan.Plan`."""

from __future__ import annotations

from typing import Any

from ..memory import NpuTensor
from ..types import NpuTensorInfo, QuantParameters
from ._plan import plan_for


def convert(src: NpuTensor, dst: NpuTensor, quant: QuantParameters | None = None) -> None:
    """Convert ``src`` into ``dst``'s memory: layout, dtype and quantization in one pass.

    The two tensors must be views of the same logical tensor (e.g. a model's CPU view and
    its HW view). The conversion itself is the only copy: no temporary of the tensor's size
    is made. ``quant`` applies to the integer side of a float <-> integer conversion (see
    :mod:`copyless.layout._plan` for every pair's rule). Raises :class:`LayoutError` for views
    of different logical tensors, missing or meaningless ``quant`` and overlapping memory,
    :class:`UnsupportedError` for layouts copyless does not convert.
    """
    plan_for(src.info, dst.info, quant).run(src.bytes_view(), dst.bytes_view())


def convert_array(
    src: Any,
    src_info: NpuTensorInfo,
    dst: Any,
    dst_info: NpuTensorInfo,
    quant: QuantParameters | None = None,
) -> None:
    """:func:`convert` for raw memory: ``src`` holds a ``src_info`` view, ``dst`` receives
    the ``dst_info`` view.

    Each array is a numpy array of its view's dtype and shape or flat C-contiguous bytes
    (see :meth:`Plan.run`). The plan is cached per ``(src_info, dst_info, quant)``; hot
    loops can also keep ``plan_for(src_info, dst_info, quant)`` and call its ``run``.
    """
    plan_for(src_info, dst_info, quant).run(src, dst)
