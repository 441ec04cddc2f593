"""The exception tree. Construction and queries raise these; execution returns a StatusCode.

::

    RuntimeError   (VART raises std::runtime_error: ``except RuntimeError`` catches them all)
     +-- CopylessError
          +-- ModelLoadError              missing, unreadable or corrupt compiled model
          +-- OptionError (ValueError)    unknown runner option or bad value
          +-- LayoutError (ValueError)    two views that cannot convert into each other, bad quant
          +-- MemoryTypeError (ValueError)  memory type that cannot serve the request
          +-- TensorError (ValueError)    a tensor or info that cannot be built (size, buffer, fd)
          +-- UnknownTensorError (KeyError)  no tensor of that name
          +-- UnsupportedError            the operation exists but not for this model/backend
          |    +-- DeviceUnavailableError (also an OptionError)  device="cuda" cannot run here
          +-- RunnerClosedError           use of a runner (or a pipeline) after close()
          +-- JobError                    a job the runner refused or failed; carries its status
          +-- OutOfMemoryError (MemoryError)  an allocation failed; carries the numbers

Which call raises what (execution never raises: ``execute``/``execute_async``/``wait`` and
``DeviceSession.run_inference*`` return a StatusCode; accessors return sentinels):

* ``RunnerFactory.create_runner``: ModelLoadError, OptionError (``config_json`` included),
  UnsupportedError / DeviceUnavailableError.
* ``get_tensor_info_by_name``, ``get_quant_parameters``: UnknownTensorError.
* ``allocate_npu_tensor``, ``allocate_sub_tensor``, ``NpuTensor(...)``: TensorError,
  MemoryTypeError, OutOfMemoryError; any call on a closed runner: RunnerClosedError.
* ``layout.convert``: LayoutError, UnsupportedError; ``compile_model``: UnsupportedError,
  ModelLoadError, OptionError.
* ``DeviceSession.copy_input_to_gpu`` / ``copy_output_to_cpu``: TensorError (size, dtype).
"""

from __future__ import annotations

from ._enums import StatusCode


class CopylessError(RuntimeError):
    """Root of every error copyless raises on purpose. A ``RuntimeError``, as VART's
    ``std::runtime_error``: code ported with ``except RuntimeError`` catches every one."""


class ModelLoadError(CopylessError):
    """A compiled model is missing, truncated, corrupt or otherwise unloadable."""


class OptionError(CopylessError, ValueError):
    """An unknown runner option, or a value of the wrong type or range."""


class LayoutError(CopylessError, ValueError):
    """Two tensor views that are not views of the same logical tensor, or no quant params."""


class MemoryTypeError(CopylessError, ValueError):
    """A memory type that cannot do what was asked (e.g. HW view on pageable memory)."""


class TensorError(CopylessError, ValueError):
    """A tensor whose buffer is missing, too small, read-only or unmappable."""


class UnknownTensorError(CopylessError, KeyError):
    """No tensor of that name in the model."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class UnsupportedError(CopylessError):
    """A model, layout, dtype or backend feature that copyless cannot handle here."""


class DeviceUnavailableError(OptionError, UnsupportedError):
    """The ``device`` option names a device this machine cannot run (no NVIDIA driver, no
    GPU, no CUDA provider in onnxruntime, missing CUDA libraries). The message is one line
    saying what is missing; catch it as :class:`OptionError` or :class:`UnsupportedError`."""


class RunnerClosedError(CopylessError):
    """A runner (or other owner) was used after ``close()``."""


class JobError(CopylessError):
    """A job the runner refused or that failed: ``status`` is the :class:`StatusCode` it
    returned (a :class:`copyless.Pipeline` result's ``error`` for a runner status)."""

    def __init__(self, status: StatusCode, detail: str) -> None:
        super().__init__(f"{detail}: {status.name}")
        self.status = status
        self.detail = detail


class OutOfMemoryError(CopylessError, MemoryError):
    """An allocation failed. ``requested`` is in bytes; ``detail`` says what refused it."""

    def __init__(self, requested: int, detail: str) -> None:
        super().__init__(f"could not allocate {requested} bytes: {detail}")
        self.requested = requested
        self.detail = detail
