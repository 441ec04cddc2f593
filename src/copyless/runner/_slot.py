"""An execution slot: one binding context per partition, staging and intermediate buffers.

A slot is used by one job at a time. Its buffers are allocated once (staging lazily, on the
first call that needs a conversion) and reused: a steady loop allocates nothing.
Copies happen only where the plan says so (CONVERT, GATHER, and DYNAMIC outputs whose dtype
differs from the HW view's); DIRECT tensors are bound in place, DYNAMIC ones of the HW dtype
too (the engine writes the result there, or copies it there: see the backend's docstring).
A DYNAMIC output's tensor gets its ``produced_shape`` once the engines have run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import layout as _layout
from ..backends import Engine, EngineContext
from ..model import CompiledModel
from ..types import DataType, MemoryLayout, NpuTensorInfo, TensorType
from ._plan import CONVERT, DIRECT, DYNAMIC, GATHER, Bind, CallPlan, batch_axis
from ._trace import Trace

Location = tuple[int, DataType, tuple[int, ...]]


class ExecutionSlot:
    def __init__(self, model: CompiledModel, engines: Sequence[Engine]) -> None:
        self._model = model
        self._contexts: list[EngineContext] = [engine.new_context() for engine in engines]
        self._capabilities = [engine.capabilities for engine in engines]
        self._partitions = model.partitions
        self._staging: dict[tuple[str, TensorType], npt.NDArray[Any]] = {}
        self._locations: dict[str, Location] = {}
        self._intermediates: list[npt.NDArray[Any]] = []
        self._dynamic = {s.name for s in model.outputs if s.dynamic}
        for inter in model.intermediates:
            array = np.zeros(inter.info.shape, dtype=inter.info.numpy_dtype)
            self._intermediates.append(array)
            self._locations[inter.name] = (
                int(array.ctypes.data),
                inter.info.data_type,
                inter.info.shape,
            )
        self._prepared: CallPlan | None = None

    @property
    def contexts(self) -> list[EngineContext]:
        return self._contexts

    def call_targets(self) -> tuple[tuple[Any, tuple[Any, ...]], ...]:
        """What the C fast path calls per partition: the engine's own entry point where its
        capabilities declare a raw call, else the context's ``run``."""
        return tuple(
            context.call_target() if caps.raw_call else (context.run, ())
            for context, caps in zip(self._contexts, self._capabilities, strict=True)
        )


    def run(self, plan: CallPlan, trace: Trace, job_id: int | str) -> None:
        """Bind (only when the plan changed), convert in, run every partition, convert out.

        Raises on engine failure."""
        if trace.enabled:
            self._run_traced(plan, trace, job_id)
            return
        if self._prepared is not plan:
            self.prepare(plan)
        for bind in plan.staged_inputs:
            self._stage_input(bind)
        for context in self._contexts:
            context.run()
        self._unstage_outputs(plan)

    def start(self, plan: CallPlan, done: Callable[[BaseException | None], None]) -> None:
        """Bind (only when the plan changed) and start the one partition's run without
        blocking (:attr:`Capabilities.native_async`); ``done(error or None)`` on the engine's
        thread. For plans with nothing staged: every tensor bound in place."""
        if self._prepared is not plan:
            self.prepare(plan)
        self._contexts[0].start(done)

    def _run_traced(self, plan: CallPlan, trace: Trace, job_id: int | str) -> None:
        t0 = trace.now()
        if self._prepared is not plan:
            self.prepare(plan)
        for bind in plan.staged_inputs:
            self._stage_input(bind)
        trace.add("convert_in", t0, trace.now(), job_id, bytes=plan.converted_bytes)
        for context, partition in zip(self._contexts, self._partitions, strict=True):
            ts = trace.now()
            context.run()
            trace.add(f"engine:{partition.name}", ts, trace.now(), job_id, target=partition.target)
        t2 = trace.now()
        self._unstage_outputs(plan)
        trace.add("convert_out", t2, trace.now(), job_id)

    def prepare(self, plan: CallPlan) -> None:
        """Bind every partition's inputs and outputs for ``plan`` (cached by the contexts)."""
        locations = self._locations
        for bind in plan.inputs:
            locations[bind.spec.name] = self._location(bind)
        for bind in plan.outputs:
            locations[bind.spec.name] = self._location(bind)
        for context, partition, caps in zip(
            self._contexts, self._partitions, self._capabilities, strict=True
        ):
            if caps.stream:  # runs wait for the streams that produce the bound memory
                context.order_after(plan.waits)
            for name in partition.inputs:
                context.bind_input(name, *locations[name])
            for name in partition.outputs:
                if name in self._dynamic:
                    context.bind_output_dynamic(name, *locations[name])
                else:
                    context.bind_output(name, *locations[name])
        self._prepared = plan

    def close(self) -> None:
        for context in self._contexts:
            context.close()
        self._staging.clear()
        self._intermediates.clear()

    # -- staging ------------------------------------------------------------------------
    def _staging_for(self, info: NpuTensorInfo, view: TensorType) -> npt.NDArray[Any]:
        key = (info.name, view)
        array = self._staging.get(key)
        if array is None or array.shape != info.shape:
            array = np.zeros(info.shape, dtype=info.numpy_dtype)
            self._staging[key] = array
        return array

    def _location(self, bind: Bind) -> Location:
        hw = bind.spec.hw
        if bind.kind == DIRECT:
            return (bind.address, hw.data_type, hw.shape)
        if bind.kind == DYNAMIC:  # the tensor's shape is the capacity the caller chose
            capacity = bind.tensors[0].info.shape
            if bind.tensors[0].info.data_type is hw.data_type:
                return (bind.address, hw.data_type, capacity)
            staging = self._staging_for(hw.with_shape(capacity), TensorType.HW)
            return (int(staging.ctypes.data), hw.data_type, capacity)
        staging = self._staging_for(hw, TensorType.HW)
        return (int(staging.ctypes.data), hw.data_type, hw.shape)

    def _stage_input(self, bind: Bind) -> None:
        spec = bind.spec
        hw = spec.hw
        staging = self._staging_for(hw, TensorType.HW)
        if bind.kind == CONVERT:
            source, source_info = self._gather(bind, spec.cpu, TensorType.CPU)
            _layout.convert_array(source, source_info, staging, hw, spec.quant)
            return
        axis = batch_axis(hw)  # GATHER of HW frames
        for b, tensor in enumerate(bind.tensors):
            np.copyto(_frame(staging, axis, b), tensor.numpy().reshape(_frame_shape(hw, axis)))

    def _gather(
        self, bind: Bind, info: NpuTensorInfo, view: TensorType
    ) -> tuple[npt.NDArray[Any], NpuTensorInfo]:
        """The CPU-view source of a conversion: the tensor itself, or frames gathered."""
        first = bind.tensors[0]
        if first.info.shape == info.shape:
            return first.numpy(), first.info
        staging = self._staging_for(info, view)
        axis = batch_axis(info)
        for b, tensor in enumerate(bind.tensors):
            np.copyto(_frame(staging, axis, b), tensor.numpy().reshape(_frame_shape(info, axis)))
        return staging, info

    def _unstage_outputs(self, plan: CallPlan) -> None:
        """Convert/scatter the staged outputs; give data-dependent outputs their shapes.
        Raises DynamicOutputTooSmall (after every shape is set) when one did not fit."""
        too_small = ""
        for bind in plan.staged_outputs:
            if bind.kind != DYNAMIC:
                self._unstage_output(bind)
                continue
            message = self._finish_dynamic(bind)  # first: every output gets its shape
            too_small = too_small or message
        if too_small:
            # Made here, kept by no local: an exception in a local of the frame its
            # traceback holds is a cycle that would keep the call's tensors until a gc pass.
            raise DynamicOutputTooSmall(too_small)

    def _unstage_output(self, bind: Bind) -> None:
        spec = bind.spec
        staging = self._staging_for(spec.hw, TensorType.HW)
        if bind.kind == GATHER:
            axis = batch_axis(spec.hw)
            for b, tensor in enumerate(bind.tensors):
                np.copyto(tensor.numpy(), _frame(staging, axis, b).reshape(tensor.info.shape))
            return
        cpu = spec.cpu
        first = bind.tensors[0]
        if first.info.shape == cpu.shape:
            _layout.convert_array(staging, spec.hw, first.numpy(), first.info, spec.quant)
            return
        full = self._staging_for(cpu, TensorType.CPU)
        _layout.convert_array(staging, spec.hw, full, cpu, spec.quant)
        axis = batch_axis(cpu)
        for b, tensor in enumerate(bind.tensors):
            np.copyto(tensor.numpy(), _frame(full, axis, b).reshape(tensor.info.shape))

    def _finish_dynamic(self, bind: Bind) -> str:
        """Set the tensor's produced shape; convert a staged result (CPU view of another
        dtype) into it. Why the result did not fit, or "" when it did."""
        spec, tensor = bind.spec, bind.tensors[0]
        shape = self._contexts[self._context_of(spec.name)].produced_shape(spec.name)
        tensor._produced_shape = shape
        count = math.prod(shape)
        if count > tensor.info.size:
            needed = count * tensor.info.data_type.itemsize
            return (
                f"output {spec.name!r} produced shape {list(shape)} ({needed} bytes) but its "
                f"tensor holds {tensor.info.size_in_bytes} bytes; allocate at least that "
                "capacity (see produced_shape)"
            )
        hw = spec.hw
        if count and tensor.info.data_type is not hw.data_type:
            staging = self._staging_for(hw.with_shape(tensor.info.shape), TensorType.HW)
            source, target = _flat(hw, count), _flat(tensor.info, count)
            _layout.convert_array(
                staging.reshape(-1)[:count], source, tensor.numpy().reshape(-1)[:count],
                target, spec.quant,
            )  # fmt: skip
        return ""

    def _context_of(self, name: str) -> int:
        for index, partition in enumerate(self._partitions):
            if name in partition.outputs:
                return index
        raise KeyError(name)


class DynamicOutputTooSmall(Exception):
    """Internal: a data-dependent output's result did not fit the caller's tensor."""


def _flat(info: NpuTensorInfo, count: int) -> NpuTensorInfo:
    return NpuTensorInfo(
        info.name, info.data_type, info.direction, info.tensor_type, MemoryLayout.GENERIC, (count,)
    )


def _frame(array: npt.NDArray[Any], axis: int, index: int) -> npt.NDArray[Any]:
    key: list[Any] = [slice(None)] * array.ndim
    key[axis] = slice(index, index + 1)
    view: npt.NDArray[Any] = array[tuple(key)]
    return view


def _frame_shape(info: NpuTensorInfo, axis: int) -> tuple[int, ...]:
    shape = list(info.shape)
    shape[axis] = 1
    return tuple(shape)
