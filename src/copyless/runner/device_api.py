"""The device-pointer API: keep a whole pipeline on the GPU.

::

    with DeviceSession("model.onnx", device="cuda") as session:
        buffers = session.get_device_buffers()        # the session's device tensors
        my_preprocess_kernel(frame, buffers.d_input, stream=session.stream)
        session.run_inference_device()                # on the session's buffers: zero-copy
        my_postprocess_kernel(buffers.d_output)

        session.run_inference_device(cupy_in, torch_out)  # any device producer: zero-copy
        session.run_inference(host_in, host_out)          # the regular API: H2D, run, D2H

Copies happen only in :meth:`DeviceSession.copy_input_to_gpu`,
:meth:`DeviceSession.copy_output_to_cpu` and :meth:`DeviceSession.run_inference` (which is
those two around a run). Tensors are in the compiled model's HW view (for a plain ONNX
model: its own dtype and shape).

Stream rule: the engine runs on :attr:`DeviceSession.stream`. A producer's writes are
ordered before the engine reads them as follows: DLPack producers are asked to order them
(``__dlpack__(stream=session.stream)``); a ``__cuda_array_interface__`` ``"stream"`` is
waited on with an event; for ``int`` pointers, pass the producer's stream as ``stream=`` or
write on ``session.stream`` (or synchronize). Every method returns when its work is done,
so buffers handed out are complete and need no stream ordering by their consumers.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends._cuda_driver import CudaDriver
from ..backends._cuda_options import parse_cuda_options
from ..backends.cuda import CudaBackend, CudaEngine, check_available
from ..memory.device import DeviceArray, as_device_array, device_pointer
from ..model import CompiledModel, compile_to_memory, load_model
from ..types import (
    ModelLoadError,
    NpuTensorInfo,
    OptionError,
    RunnerClosedError,
    TensorError,
    UnsupportedError,
)
from .options import RunnerOptions

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeviceBuffers:
    """The session's own device tensors. ``d_input``/``d_output`` are the first ones'
    device pointers (the C API's names); ``inputs``/``outputs`` all of them, in model order."""

    d_input: int
    d_output: int
    inputs: tuple[DeviceArray, ...]
    outputs: tuple[DeviceArray, ...]


class DeviceSession:
    """One model on one GPU with session-owned device buffers (see the module docstring).

    ``model``: an ``.onnx`` file (compiled in memory with ``compile_options``, e.g.
    ``batch_size=32``), a compiled ``.rai``/directory, or a :class:`CompiledModel`.
    ``stream``: a CUDA stream handle to run on (default: one the session creates).
    Raises :class:`OptionError`, :class:`ModelLoadError` or :class:`UnsupportedError` (no
    CUDA provider, driver or device: never a CPU fallback). Not thread-safe.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | CompiledModel,
        device: str = "cuda",
        *,
        device_id: int = 0,
        stream: int | None = None,
        cuda_options: Mapping[str, Any] | None = None,
        num_threads: int = 1,
        **compile_options: Any,
    ) -> None:
        if device not in ("cuda", "tensorrt"):
            raise OptionError(f"device must be 'cuda' or 'tensorrt', got {device!r}")
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
            raise OptionError(f"num_threads must be an int >= 1, got {num_threads!r}")
        extra = dict(cuda_options or {})
        options = parse_cuda_options({**extra, "device_id": device_id, "stream": stream})
        source = _check_source(model, compile_options)
        check_available(device)
        compiled = _load(source, compile_options)
        partition = _single_partition(compiled)
        self._backend = CudaBackend(RunnerOptions(device=device), options)
        self._engine: CudaEngine | None = self._backend.load(partition, num_threads)
        self._context = self._engine.new_context()
        self._inputs = tuple(s.hw for s in compiled.inputs)
        self._outputs = tuple(s.hw for s in compiled.outputs)
        self._model = compiled
        ins = tuple(DeviceArray.allocate(i.shape, i.data_type, device_id) for i in self._inputs)
        outs = tuple(DeviceArray.allocate(i.shape, i.data_type, device_id) for i in self._outputs)
        self._buffers = DeviceBuffers(ins[0].ptr, outs[0].ptr, ins, outs)
        self._finalizer = weakref.finalize(self, _release, self._context, self._engine)

    # -- attributes ---------------------------------------------------------------------
    @property
    def stream(self) -> int:
        """The CUDA stream the engine runs on (write inputs on it to need no ordering)."""
        return self._backend.stream

    @property
    def device(self) -> str:
        return self._backend.device

    @property
    def device_id(self) -> int:
        return self._backend.device_id

    @property
    def input_infos(self) -> tuple[NpuTensorInfo, ...]:
        return self._inputs

    @property
    def output_infos(self) -> tuple[NpuTensorInfo, ...]:
        return self._outputs

    @property
    def model(self) -> CompiledModel:
        return self._model

    @property
    def closed(self) -> bool:
        return self._engine is None

    # -- the API ------------------------------------------------------------------------
    def get_device_buffers(self) -> DeviceBuffers:
        """The session's device tensors (no copy); they live as long as you hold them."""
        self._check_open()
        return self._buffers

    def copy_input_to_gpu(self, input_cpu: Any) -> None:
        """Copy host array(s) into the session's input buffer(s) (H2D: a copy). Returns
        when the copy is complete."""
        self._check_open()
        arrays = _per_tensor(input_cpu, self._inputs, "input_cpu")
        pairs = zip(arrays, self._inputs, strict=True)
        checked = [host_array(a, info, writable=False) for a, info in pairs]
        drv, stream = self._driver_on_stream()
        for array, buffer in zip(checked, self._buffers.inputs, strict=True):
            drv.copy_htod(buffer.ptr, array.ctypes.data, array.nbytes, stream)
        drv.synchronize(stream)

    def copy_output_to_cpu(self, output_cpu: Any) -> None:
        """Copy the session's output buffer(s) into writable host array(s) (D2H: a copy)."""
        self._check_open()
        arrays = _per_tensor(output_cpu, self._outputs, "output_cpu")
        pairs = zip(arrays, self._outputs, strict=True)
        checked = [host_array(a, info, writable=True) for a, info in pairs]
        drv, stream = self._driver_on_stream()
        for array, buffer in zip(checked, self._buffers.outputs, strict=True):
            drv.copy_dtoh(array.ctypes.data, buffer.ptr, array.nbytes, stream)
        drv.synchronize(stream)

    def run_inference_device(
        self, d_input: Any = None, d_output: Any = None, *, stream: int | None = None
    ) -> None:
        """Run on device memory in place (zero-copy); ``None`` means the session's buffers.

        Each argument is one tensor or a sequence (one per model tensor) of: ``int`` device
        pointers, :class:`DeviceArray`, DLPack or ``__cuda_array_interface__`` producers
        (CuPy, PyTorch). ``stream`` names the producer stream of ``int`` pointers. Returns
        when the outputs are complete.
        """
        self._check_open()
        ins = self._device_args(d_input, self._buffers.inputs, self._inputs, stream, False)
        outs = self._device_args(d_output, self._buffers.outputs, self._outputs, stream, True)
        context = self._context
        for arrays, infos, output in ((ins, self._inputs, False), (outs, self._outputs, True)):
            for array, info in zip(arrays, infos, strict=True):
                context.bind_device(info.name, array.ptr, info.data_type, info.shape, output=output)
                if array.stream is not None:
                    context.order_after(array.stream)
        context.run()  # the arrays (and the producers they hold) live until it returns

    def run_inference(self, input_cpu: Any, output_cpu: Any) -> None:
        """The regular API: copy in, run on the session's buffers, copy out."""
        self.copy_input_to_gpu(input_cpu)
        self.run_inference_device()
        self.copy_output_to_cpu(output_cpu)

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        """Release the engine and the session's buffers (idempotent). Buffers you still
        hold stay valid (they own their memory); other calls then raise."""
        if self._engine is None:
            return
        self._engine = None
        self._finalizer()

    def __enter__(self) -> DeviceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<DeviceSession {self._model.name!r} on {self.device}:{self.device_id} {state}>"

    # -- helpers ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._engine is None:
            raise RunnerClosedError("the DeviceSession is closed")

    def _driver_on_stream(self) -> tuple[CudaDriver, int]:
        drv = self._backend.driver
        drv.use(self.device_id)
        return drv, self.stream

    def _device_args(
        self,
        arg: Any,
        own: tuple[DeviceArray, ...],
        infos: tuple[NpuTensorInfo, ...],
        stream: int | None,
        writable: bool,
    ) -> list[DeviceArray]:
        if arg is None:
            return list(own)
        items = _per_tensor(arg, infos, "d_output" if writable else "d_input")
        return [
            device_argument(
                item,
                info,
                session_stream=self.stream,
                producer_stream=stream,
                device_id=self.device_id,
                writable=writable,
            )
            for item, info in zip(items, infos, strict=True)
        ]


def device_argument(
    obj: Any,
    info: NpuTensorInfo,
    *,
    session_stream: int,
    producer_stream: int | None,
    device_id: int,
    writable: bool,
) -> DeviceArray:
    """One ``run_inference_device`` argument as a checked :class:`DeviceArray` (no copy).

    ``int`` pointers take ``producer_stream``; DLPack producers are asked to order their
    writes before ``session_stream``; ``__cuda_array_interface__`` streams are kept.
    """
    if isinstance(obj, int) and not isinstance(obj, bool):
        return device_pointer(obj, info, device_id=device_id, stream=producer_stream)
    array = as_device_array(obj, stream=session_stream, device_id=device_id)
    array.check(info, writable=writable)
    if array.device_id != device_id:
        raise TensorError(
            f"tensor {info.name!r}: memory on cuda:{array.device_id}, session on cuda:{device_id}"
        )
    return array


def host_array(obj: Any, info: NpuTensorInfo, *, writable: bool) -> npt.NDArray[Any]:
    """``obj`` checked as host memory for ``info``: a C-contiguous numpy array of its dtype
    and size (any shape), writable for outputs. Raises :class:`TensorError`."""
    if not isinstance(obj, np.ndarray):
        hint = " (device memory: use run_inference_device)" if _is_device(obj) else ""
        raise TensorError(
            f"tensor {info.name!r}: expected a numpy array, got {type(obj).__name__}{hint}"
        )
    if obj.dtype != info.numpy_dtype or obj.nbytes != info.size_in_bytes:
        raise TensorError(
            f"tensor {info.name!r}: array {obj.dtype}{list(obj.shape)} ({obj.nbytes} bytes) "
            f"does not match {info.describe()} ({info.size_in_bytes} bytes)"
        )
    if not obj.flags.c_contiguous:
        raise TensorError(f"tensor {info.name!r}: the array is not C-contiguous")
    if writable and not obj.flags.writeable:
        raise TensorError(f"tensor {info.name!r}: the output array is read-only")
    return obj


def _is_device(obj: Any) -> bool:
    return hasattr(obj, "__cuda_array_interface__") or isinstance(obj, DeviceArray)


def _per_tensor(arg: Any, infos: tuple[NpuTensorInfo, ...], what: str) -> list[Any]:
    """One item per model tensor: a lone item for a single-tensor side, else a sequence."""
    if isinstance(arg, (list, tuple)):
        if len(arg) != len(infos):
            raise TensorError(f"{what}: {len(arg)} item(s) for {len(infos)} tensor(s)")
        return list(arg)
    if len(infos) != 1:
        raise TensorError(f"{what}: the model has {len(infos)} tensors: pass a list of them")
    return [arg]


def _check_source(model: Any, compile_options: dict[str, Any]) -> Path | CompiledModel:
    if isinstance(model, CompiledModel):
        if compile_options:
            raise OptionError(f"compile options {sorted(compile_options)} need an .onnx model")
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise ModelLoadError(f"model must be a path or a CompiledModel, got {type(model).__name__}")
    path = Path(model)
    if not path.exists():
        raise ModelLoadError(f"{path}: no such file or directory")
    if compile_options and path.suffix != ".onnx":
        raise OptionError(f"compile options {sorted(compile_options)} need an .onnx model")
    return path


def _load(source: Path | CompiledModel, compile_options: dict[str, Any]) -> CompiledModel:
    if isinstance(source, CompiledModel):
        return source
    if source.suffix == ".onnx":
        return compile_to_memory(source, **compile_options)
    return load_model(source)


def _single_partition(model: CompiledModel) -> Any:
    if len(model.partitions) != 1:
        raise UnsupportedError(
            f"{model.name}: {len(model.partitions)} partitions; the device API runs "
            "single-partition models (use RunnerFactory for split models)"
        )
    dynamic = [s.name for s in model.outputs if s.dynamic]
    if dynamic:
        raise UnsupportedError(
            f"{model.name}: outputs {dynamic} have data-dependent shapes; device buffers "
            "need fixed shapes (use RunnerFactory)"
        )
    return model.partitions[0]


def _release(context: Any, engine: CudaEngine) -> None:
    context.close()
    engine.close()


__all__ = ["DeviceBuffers", "DeviceSession", "device_argument", "host_array"]
