"""The device-pointer API of seed 003 as a thin facade over one :class:`Runner`.

::

    with cl.DeviceSession("model.onnx", cuda_options={"stream": s.ptr}) as session:
        buffers = session.get_device_buffers()       # the session's device tensors
        my_preprocess_kernel(frame, buffers.d_input)  # queued on s
        session.run_inference_device()               # on those buffers: zero-copy
        my_postprocess_kernel(buffers.d_output)       # queued on s

        session.run_inference_device(cupy_in, torch_out)  # any device memory: zero-copy
        session.run_inference(host_in, host_out)          # the regular API: host arrays

Seed 003's calls as written, sizes in elements (optional, checked: a size that is not the
tensor's gives INVALID_INPUT/INVALID_OUTPUT or a TensorError, never a partial run)::

    session.run_inference(input_cpu, output_cpu, input_size, output_size)
    session.copy_input_to_gpu(input_cpu, input_size)
    session.run_inference_device(buffers.d_input, buffers.d_output, input_size, output_size)
    session.copy_output_to_cpu(output_cpu, output_size)

``buffers.d_input``/``d_output`` are accepted on every device; on ``device="cpu"`` they are
the host addresses of the session's buffers (and no other ``int`` is).

Everything runs through ``Runner.execute`` on a runner with ``device="cuda"`` (or
``"tensorrt"``; ``"cpu"`` runs the same calls on host memory, for code that must also run
without a GPU). The session's buffers are ``Runner.allocate_npu_tensor`` tensors: device
memory that CuPy and PyTorch import without a copy (``cupy.from_dlpack(buffers.inputs[0])``).

Copies happen only in :meth:`DeviceSession.copy_input_to_gpu` (H2D),
:meth:`DeviceSession.copy_output_to_cpu` (D2H) and :meth:`DeviceSession.run_inference`
(host memory, copied in and out by ONNX Runtime inside the run). Tensors are in the compiled
model's HW view (for a plain ONNX model: its own dtype and shape), whole batches.

Ordering: see :mod:`copyless.backends._cuda`. With ``cuda_options={"stream": s}`` the engine
runs on ``s``; otherwise work on the legacy default stream is ordered before it, and a
producer on another stream is named by its ``__cuda_array_interface__`` (v3) or, for
``int`` pointers, by ``stream=``. Every call returns when its results are complete.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..memory import cuda as cuda_memory
from ..model import CompiledModel, load_model
from ..types import (
    MemoryType,
    ModelLoadError,
    NpuTensorInfo,
    OptionError,
    RunnerClosedError,
    StatusCode,
    TensorDirection,
    TensorError,
    TensorType,
)
from ._factory import RunnerFactory
from ._runner import Runner

logger = logging.getLogger(__name__)

__all__ = ["DeviceBuffers", "DeviceSession"]

_DEVICES = ("cuda", "tensorrt", "cpu")
#: The seed's element counts: None (not checked), one int (a single tensor), or one per tensor.
Sizes = int | Sequence[int] | None


@dataclass(frozen=True, slots=True)
class DeviceBuffers:
    """The session's own tensors. ``d_input``/``d_output`` are the first ones' addresses (the
    C API's names); ``inputs``/``outputs`` all of them, in model order."""

    d_input: int
    d_output: int
    inputs: tuple[NpuTensor, ...]
    outputs: tuple[NpuTensor, ...]


class DeviceSession:
    """One model on one GPU with session-owned device buffers (see the module docstring).

    ``model``: an ``.onnx`` file (compiled in memory with ``compile_options``, e.g.
    ``batch_size=4``), a compiled ``.rai``/directory, or a :class:`CompiledModel`.
    ``options``: further runner options; ``cuda_options``: the backend's (``stream``,
    ``device_id``, ``cuda_graph``...). Raises :class:`OptionError` (a
    ``DeviceUnavailableError`` when this machine cannot run ``device``: never a CPU
    fallback), :class:`ModelLoadError` or :class:`UnsupportedError`.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | CompiledModel,
        device: str = "cuda",
        *,
        options: Mapping[str, Any] | None = None,
        cuda_options: Mapping[str, Any] | None = None,
        **compile_options: Any,
    ) -> None:
        if device not in _DEVICES:
            raise OptionError(f"device must be one of {list(_DEVICES)}, got {device!r}")
        settings = {**(options or {}), "device": device}
        if cuda_options is not None:
            settings["cuda_options"] = cuda_options
        compiled = _load(model, compile_options)
        self._runner: Runner | None = RunnerFactory.from_compiled(compiled, settings)
        runner = self._runner
        self._inputs = tuple(runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW))
        self._outputs = tuple(runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW))
        ins = tuple(runner.allocate_npu_tensor(info) for info in self._inputs)
        outs = tuple(runner.allocate_npu_tensor(info) for info in self._outputs)
        self._buffers = DeviceBuffers(ins[0].address, outs[0].address, ins, outs)
        self._device_id = runner.options.cuda_options.device_id
        # Per (tensor name, device memory?): the last object wrapped, its stream, the tensor.
        self._wrapped: dict[tuple[str, bool], tuple[Any, int | None, NpuTensor]] = {}

    # -- attributes ---------------------------------------------------------------------
    @property
    def runner(self) -> Runner:
        """The runner every call goes through (raises once closed)."""
        runner = self._runner
        if runner is None:
            raise RunnerClosedError("the DeviceSession is closed")
        return runner

    @property
    def device(self) -> str:
        """The device asked for (``"cpu"``, ``"cuda"``, ``"tensorrt"``): the runner's
        ``device`` option, whichever engine ``RunnerType.VAIML`` chose (OpenVINO names its
        CPU ``"CPU"``: that is the runner's ``get_property("device")``)."""
        return str(self.runner.options.device)

    @property
    def stream(self) -> int | None:
        """The ``stream`` option: the CUDA stream every run is queued on, or None (each
        execution slot has its own)."""
        return self.runner.options.cuda_options.stream

    @property
    def input_infos(self) -> tuple[NpuTensorInfo, ...]:
        return self._inputs

    @property
    def output_infos(self) -> tuple[NpuTensorInfo, ...]:
        return self._outputs

    @property
    def closed(self) -> bool:
        return self._runner is None

    # -- seed 003's calls ---------------------------------------------------------------
    def get_device_buffers(self) -> DeviceBuffers:
        """The session's tensors (no copy); they live as long as you hold them."""
        self._check_open()
        return self._buffers

    def copy_input_to_gpu(self, input_cpu: Any, input_size: Sizes = None) -> None:
        """Copy host array(s) into the session's input buffer(s) (H2D: a copy); returns when
        done. ``input_size``: the seed's element count (one int per tensor, optional).
        Raises :class:`TensorError`, copying nothing, for an array of the wrong dtype or
        size or an ``input_size`` that is not the tensor's."""
        self._check_open()
        check_sizes(input_size, self._inputs, "input_size")
        arrays = _per_tensor(input_cpu, self._inputs, "input_cpu")
        checked = [host_array(a, i, writable=False) for a, i in zip(arrays, self._inputs, strict=True)]  # noqa: E501
        for array, buffer in zip(checked, self._buffers.inputs, strict=True):
            _copy(buffer, array, to_buffer=True)

    def copy_output_to_cpu(self, output_cpu: Any, output_size: Sizes = None) -> None:
        """Copy the session's output buffer(s) into writable host array(s) (D2H: a copy).
        ``output_size`` and errors as in :meth:`copy_input_to_gpu`."""
        self._check_open()
        check_sizes(output_size, self._outputs, "output_size")
        arrays = _per_tensor(output_cpu, self._outputs, "output_cpu")
        checked = [host_array(a, i, writable=True) for a, i in zip(arrays, self._outputs, strict=True)]  # noqa: E501
        for array, buffer in zip(checked, self._buffers.outputs, strict=True):
            _copy(buffer, array, to_buffer=False)

    def run_inference_device(
        self,
        d_input: Any = None,
        d_output: Any = None,
        input_size: Sizes = None,
        output_size: Sizes = None,
        *,
        stream: int | None = None,
    ) -> StatusCode:
        """Run on device memory in place (zero-copy); ``None`` means the session's buffers.

        Each argument is one tensor or a sequence (one per model tensor) of device
        NpuTensors, CuPy arrays, PyTorch CUDA tensors, ``__cuda_array_interface__`` or
        DLPack producers, or ``int`` device pointers (``stream``: the stream that wrote
        them). The session's own pointers (``get_device_buffers().d_input``/``d_output``)
        are accepted on every device, ``cpu`` included (host addresses there); on ``cpu``
        any other ``int`` is refused. ``input_size``/``output_size``: the seed's element
        counts (optional, one int per tensor). Returns ``Runner.execute``'s status, or
        INVALID_INPUT / INVALID_OUTPUT (logged, naming the tensor; nothing runs) for host
        memory, memory on another device, a pointer that is not the session's on ``cpu``,
        or a size that is not the tensor's.
        """
        runner = self.runner
        try:
            check_sizes(input_size, self._inputs, "input_size")
            ins = self._device_tensors(d_input, self._buffers.inputs, self._inputs, stream)
        except TensorError as exc:
            logger.error("run_inference_device: %s", exc)
            return StatusCode.INVALID_INPUT
        try:
            check_sizes(output_size, self._outputs, "output_size")
            outs = self._device_tensors(d_output, self._buffers.outputs, self._outputs, stream)
        except TensorError as exc:
            logger.error("run_inference_device: %s", exc)
            return StatusCode.INVALID_OUTPUT
        return runner.execute([ins], [outs])

    def run_inference(
        self,
        input_cpu: Any,
        output_cpu: Any,
        input_size: Sizes = None,
        output_size: Sizes = None,
    ) -> StatusCode:
        """The regular API: host arrays in and out (on a GPU the engine copies them in and
        out inside the run; on ``cpu`` they are bound in place). ``input_size`` /
        ``output_size``: the seed's element counts (optional, one int per tensor).

        Returns ``Runner.execute``'s status; bad arrays or sizes give INVALID_INPUT /
        INVALID_OUTPUT (logged; nothing runs).
        """
        runner = self.runner
        try:
            check_sizes(input_size, self._inputs, "input_size")
            ins = self._host_tensors(input_cpu, self._inputs, "input_cpu")
        except TensorError as exc:
            logger.error("run_inference: %s", exc)
            return StatusCode.INVALID_INPUT
        try:
            check_sizes(output_size, self._outputs, "output_size")
            outs = self._host_tensors(output_cpu, self._outputs, "output_cpu")
        except TensorError as exc:
            logger.error("run_inference: %s", exc)
            return StatusCode.INVALID_OUTPUT
        return runner.execute([ins], [outs])

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        """Close the runner (idempotent). Buffers you still hold stay valid: they own their
        memory. Other calls then raise :class:`RunnerClosedError`."""
        runner, self._runner = self._runner, None
        self._wrapped.clear()
        if runner is not None:
            runner.close()

    def __enter__(self) -> DeviceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._runner is None else f"on {self.device}"
        return f"<DeviceSession {[i.name for i in self._inputs]} {state}>"

    # -- helpers ------------------------------------------------------------------------
    def _check_open(self) -> None:
        self.runner  # noqa: B018 - raises RunnerClosedError once closed

    def _device_tensors(
        self,
        arg: Any,
        own: tuple[NpuTensor, ...],
        infos: tuple[NpuTensorInfo, ...],
        stream: int | None,
    ) -> list[NpuTensor]:
        if arg is None:
            return list(own)
        what = "d_input" if infos is self._inputs else "d_output"
        items = _per_tensor(arg, infos, what)
        pairs = zip(items, infos, strict=True)
        return [self._device_tensor(item, info, stream) for item, info in pairs]

    def _device_tensor(self, item: Any, info: NpuTensorInfo, stream: int | None) -> NpuTensor:
        """``item`` as a device NpuTensor; the last one wrapped per tensor is reused, so a
        loop over the same buffers keeps the runner's cached binding (and its fast path)."""
        if isinstance(item, NpuTensor):
            return item
        if isinstance(item, int) and not isinstance(item, bool):
            own = self._own_pointer(item, info)
            if own is not None:
                return own
        cached = self._cached(info, item, stream, device=True)
        if cached is not None:
            return cached
        if isinstance(item, (bool, np.ndarray)) or not (
            isinstance(item, int) or cuda_memory.is_device_producer(item)
        ):
            raise TensorError(
                f"{info.direction.name.lower()} tensor {info.name!r}: {type(item).__name__} is "
                "not device memory (use run_inference or copy_input_to_gpu for host arrays)"
            )
        producer = self._pointer(item, info, stream) if isinstance(item, int) else item
        tensor = NpuTensor(info, producer, MemoryType.USER_POINTER_CMA)
        self._wrapped[info.name, True] = (item, stream, tensor)
        return tensor

    def _cached(
        self, info: NpuTensorInfo, item: Any, stream: int | None, *, device: bool
    ) -> NpuTensor | None:
        """The tensor wrapped last time for ``info`` if ``item`` is the same object (the same
        pointer and stream for an int): a loop over the same buffers then keeps the
        runner's cached plan and binding (and its fast path). Holds ``item`` until then."""
        cached = self._wrapped.get((info.name, device))
        if cached is None or cached[1] != stream:
            return None
        same = cached[0] == item if isinstance(item, int) else cached[0] is item
        return cached[2] if same else None

    def _own_pointer(self, ptr: int, info: NpuTensorInfo) -> NpuTensor | None:
        """The session's own tensor for ``info`` when ``ptr`` is its address; None for
        another pointer on a GPU. On ``cpu`` another pointer is refused (TensorError): a
        host address cannot be checked, so only the session's are trusted."""
        own = self._buffers.inputs + self._buffers.outputs
        for tensor in own:
            if tensor.info.name == info.name and tensor.address == ptr:
                return tensor
        if self.device == "cpu":
            mine = [hex(t.address) for t in own if t.info.name == info.name]
            raise TensorError(
                f"{info.direction.name.lower()} tensor {info.name!r}: {ptr:#x} is not the "
                f"session's buffer ({', '.join(mine)}); on device 'cpu' only the pointers of "
                "get_device_buffers() are accepted (pass numpy arrays to run_inference)"
            )
        return None

    def _pointer(self, ptr: int, info: NpuTensorInfo, stream: int | None) -> Any:
        """An ``int`` device pointer, trusted to hold ``info.size_in_bytes``."""
        owner = cuda_memory.pointer_device(ptr) if ptr > 0 else None
        if owner is None:
            raise TensorError(
                f"{info.direction.name.lower()} tensor {info.name!r}: {ptr:#x} is not device "
                f"memory (the session runs on cuda:{self._device_id})"
            )
        return cuda_memory.DeviceMemory(ptr, info.size_in_bytes, owner, None, stream)

    def _host_tensors(
        self, arg: Any, infos: tuple[NpuTensorInfo, ...], what: str
    ) -> list[NpuTensor]:
        arrays = _per_tensor(arg, infos, what)
        writable = infos is self._outputs
        tensors = []
        for array, info in zip(arrays, infos, strict=True):
            tensor = self._cached(info, array, None, device=False)
            if tensor is None:
                checked = host_array(array, info, writable=writable).reshape(info.shape)
                tensor = NpuTensor(info, checked, MemoryType.USER_POINTER_CMA)
                self._wrapped[info.name, False] = (array, None, tensor)
            tensors.append(tensor)
        return tensors


def host_array(obj: Any, info: NpuTensorInfo, *, writable: bool) -> npt.NDArray[Any]:
    """``obj`` checked as host memory for ``info``: a C-contiguous numpy array of its dtype
    and size (any shape), writable for outputs. Raises :class:`TensorError`."""
    if not isinstance(obj, np.ndarray):
        device = cuda_memory.is_device_producer(obj)
        hint = " (device memory: use run_inference_device)" if device else ""
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


def check_sizes(sizes: Sizes, infos: tuple[NpuTensorInfo, ...], what: str) -> None:
    """TensorError unless ``sizes`` (elements, as seed 003 passes them) names each tensor's
    whole size: a smaller count would run on part of a buffer, so it is refused."""
    if sizes is None:
        return
    if isinstance(sizes, int) and not isinstance(sizes, bool):
        items: Sequence[Any] = [sizes]
    elif isinstance(sizes, (list, tuple)):
        items = sizes
    else:
        raise TensorError(f"{what} must be an int or a list of ints, got {type(sizes).__name__}")
    if len(items) != len(infos):
        raise TensorError(f"{what}: {len(items)} size(s) for {len(infos)} tensor(s)")
    for size, info in zip(items, infos, strict=True):
        if isinstance(size, bool) or not isinstance(size, int) or size != info.size:
            raise TensorError(
                f"{what}={size!r} does not match tensor {info.name!r}: {info.describe()} "
                f"holds {info.size} elements"
            )


def _copy(buffer: NpuTensor, host: npt.NDArray[Any], *, to_buffer: bool) -> None:
    memory = buffer.device_memory
    if memory is None:  # a CPU session's buffers are host memory
        view = buffer.numpy().reshape(-1).view(np.uint8)
        flat = host.reshape(-1).view(np.uint8)
        np.copyto(view if to_buffer else flat, flat if to_buffer else view)
    elif to_buffer:
        cuda_memory.copy_to_device(memory, host)
    else:
        cuda_memory.copy_to_host(host, memory)


def _per_tensor(arg: Any, infos: tuple[NpuTensorInfo, ...], what: str) -> Sequence[Any]:
    """One item per model tensor: a lone item for a single-tensor side, else a sequence."""
    if isinstance(arg, (list, tuple)):
        if len(arg) != len(infos):
            raise TensorError(f"{what}: {len(arg)} item(s) for {len(infos)} tensor(s)")
        return arg
    if len(infos) != 1:
        raise TensorError(f"{what}: the model has {len(infos)} tensors: pass a list of them")
    return [arg]


def _load(model: Any, compile_options: dict[str, Any]) -> CompiledModel:
    if isinstance(model, CompiledModel):
        if compile_options:
            raise OptionError(f"compile options {sorted(compile_options)} need an .onnx model")
        return model
    if not isinstance(model, (str, os.PathLike)):
        kind = type(model).__name__
        raise ModelLoadError(f"model must be a path or a CompiledModel, got {kind}")
    path = Path(model)
    if not path.exists():
        raise ModelLoadError(f"{path}: no such file or directory")
    if path.suffix == ".onnx":
        from ..model import compile_to_memory  # the compiler: loaded on first use

        return compile_to_memory(path, **compile_options)
    if compile_options:
        raise OptionError(f"compile options {sorted(compile_options)} need an .onnx model")
    return load_model(path)
