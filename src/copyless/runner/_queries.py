"""What a runner says about its model: the VART-ML query calls, apart from execution."""

from __future__ import annotations

from ..model import CompiledModel, TensorSpec
from ..types import (
    NpuTensorInfo,
    QuantParameters,
    ReadOnly,
    RunnerClosedError,
    TensorDirection,
    TensorType,
    UnknownTensorError,
)
from ._options import RunnerOptions


class ModelQueries:
    """The tensor queries of :class:`~copyless.runner.Runner` (its base class)."""

    _model: CompiledModel
    _options: RunnerOptions
    _closed: bool

    def __init__(self, model: CompiledModel, options: RunnerOptions) -> None:
        self._model = model
        self._options = options
        self._closed = False
        self._specs = {s.name: s for s in model.inputs + model.outputs}

    model = ReadOnly[CompiledModel]("The compiled model this runner executes.")
    options = ReadOnly[RunnerOptions]("The validated options (see README, Runner options).")
    closed = ReadOnly[bool]("Whether :meth:`close` ran.")

    def get_tensors_info(
        self, direction: TensorDirection, tensor_type: TensorType | None = None
    ) -> list[NpuTensorInfo]:
        """Infos of the model's inputs or outputs in ``tensor_type`` view (default: option)."""
        self._check_open()
        if not isinstance(direction, TensorDirection):
            raise TypeError(f"direction must be a TensorDirection, got {direction!r}")
        specs = self._model.inputs if direction is TensorDirection.INPUT else self._model.outputs
        view = tensor_type if tensor_type is not None else self._default_view(direction)
        if not isinstance(view, TensorType):
            raise TypeError(f"tensor_type must be a TensorType, got {view!r}")
        return [s.hw if view is TensorType.HW else s.cpu for s in specs]

    def get_tensor_info_by_name(
        self, name: str, tensor_type: TensorType | None = None
    ) -> NpuTensorInfo:
        spec = self._spec(name)
        view = tensor_type if tensor_type is not None else self._default_view(spec.cpu.direction)
        return spec.hw if view is TensorType.HW else spec.cpu

    def get_quant_parameters(self, name: str) -> QuantParameters:
        """The tensor's HW quantization; ``scale=1, zero_point=0`` where there is none."""
        spec = self._spec(name)
        return spec.quant if spec.quant is not None else QuantParameters(1.0, 0)

    def get_num_input_tensors(self) -> int:
        self._check_open()
        return len(self._model.inputs)

    def get_num_output_tensors(self) -> int:
        self._check_open()
        return len(self._model.outputs)

    def get_batch_size(self, direction: TensorDirection | None = None) -> int:
        """The compiled batch size (the same for inputs and outputs)."""
        self._check_open()
        if direction is not None and not isinstance(direction, TensorDirection):
            raise TypeError(f"direction must be a TensorDirection or None, got {direction!r}")
        return self._model.batch_size

    def _check_open(self) -> None:
        if self._closed:
            raise RunnerClosedError(f"runner for {self._model.name!r} is closed")

    def _spec(self, name: str) -> TensorSpec:
        self._check_open()
        try:
            return self._specs[name]
        except (KeyError, TypeError):
            known = ", ".join(self._specs)
            raise UnknownTensorError(f"no tensor named {name!r}; the model has: {known}") from None

    def _default_view(self, direction: TensorDirection) -> TensorType:
        option = (
            self._options.input_tensor_type
            if direction is TensorDirection.INPUT
            else self._options.output_tensor_type
        )
        return TensorType[option]
