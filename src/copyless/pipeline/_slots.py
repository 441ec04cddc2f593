"""A pipeline's slots: the tensors one job binds, allocated once and reused.

A slot owns one runner-allocated (XRT_BO) tensor per model input and output, of the
model's HW view and compiled batch size, and hands out per-row views of them
(``allocate_sub_tensor``, no copy): row ``r`` of every input for the item in that row.
The views of rows ``0..n-1`` sit contiguously, so a full batch binds in place; a shorter
one is gathered by the runner (its copy). An output whose shape depends on the data is
one tensor shared by every row (the runner writes the whole batch's result at its start).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ..memory import NpuTensor
from ..runner import Runner, batch_axis, frame_shape
from ..types import NpuTensorInfo, TensorDirection, TensorType, UnsupportedError


class ItemTensors(list[NpuTensor]):
    """The tensors of one item, in the model's order: a list, plus ``row`` (the item's
    position in its job's batch: the row of a data-dependent output's ``batch_index``)."""

    __slots__ = ("row",)

    def __init__(self, tensors: Sequence[NpuTensor], row: int) -> None:
        super().__init__(tensors)
        self.row = row


@dataclass(eq=False, slots=True)
class JobSlot:
    """One job's tensors: ``inputs[r]`` / ``outputs[r]`` are row ``r``'s views."""

    index: int
    inputs: list[ItemTensors]
    outputs: list[ItemTensors]
    owners: list[NpuTensor]  # the whole-batch tensors the views keep alive

    def close(self) -> None:
        self.inputs, self.outputs, self.owners = [], [], []


def _rows(runner: Runner, info: NpuTensorInfo, rows: int, shared: bool) -> list[NpuTensor]:
    """``rows`` views of a new tensor of ``info`` (the whole tensor on a model of batch 1,
    whatever its first dim holds, or when ``shared``: a data-dependent output)."""
    tensor = runner.allocate_npu_tensor(info)
    if shared or runner.get_batch_size() == 1:
        return [tensor] * rows
    if batch_axis(info) != 0 or info.strides is not None:
        raise UnsupportedError(
            f"tensor {info.name!r} ({info.describe()}): its frames are not contiguous, so a "
            "pipeline cannot give each item a view; use batch=1 on a model compiled for batch 1"
        )
    frame = dataclasses.replace(info, shape=frame_shape(info))
    step = frame.size_in_bytes
    return [runner.allocate_sub_tensor(tensor, frame, r * step) for r in range(rows)]


def _check_bounded(runner: Runner) -> None:
    for spec, info in zip(runner.model.outputs,
                          runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW),
                          strict=True):  # fmt: skip
        if spec.dynamic and any(d < 0 for d in info.shape):
            raise UnsupportedError(
                f"output {info.name!r} ({info.describe()}) depends on the data and has no "
                "bound: compile the model with --output-capacity "
                f"{info.name}=D0xD1... so that a pipeline can allocate it"
            )


def allocate(runner: Runner, count: int, rows: int) -> list[JobSlot]:
    """``count`` slots of ``rows`` rows each, over new runner-allocated memory."""
    _check_bounded(runner)
    ins = runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW)
    outs = runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW)
    dynamic = [spec.dynamic for spec in runner.model.outputs]
    slots = []
    for index in range(count):
        in_views = [_rows(runner, info, rows, False) for info in ins]
        out_views = [_rows(runner, info, rows, d) for info, d in zip(outs, dynamic, strict=True)]
        owners = [views[0] for views in in_views + out_views]
        slots.append(JobSlot(
            index,
            [ItemTensors([views[r] for views in in_views], r) for r in range(rows)],
            [ItemTensors([views[r] for views in out_views], r) for r in range(rows)],
            owners,
        ))  # fmt: skip
    return slots
