"""Tensors a runner allocates: host memory shared by fd, or device memory where the engines
bind it (the body of ``Runner.allocate_npu_tensor`` / ``allocate_sub_tensor``)."""

from __future__ import annotations

from ..backends import HOST
from ..memory import HostMemory, NpuTensor, check_bounded
from ..memory import cuda as cuda_memory
from ..types import MemoryType, NpuTensorInfo, TensorError, TensorType


def allocate_tensor(
    info: NpuTensorInfo, memory_bank: int | None, memory: tuple[str, ...]
) -> NpuTensor:
    """A tensor of ``info`` over new memory: device memory for a HW view where ``memory``
    (the devices the engines bind) names a GPU, else fd-backed host memory (XRT_BO)."""
    if not isinstance(info, NpuTensorInfo):
        raise TensorError(f"info must be an NpuTensorInfo, got {type(info).__name__}")
    check_bounded(info)  # a data-dependent output's info takes the caller's capacity
    if memory_bank is not None and (
        isinstance(memory_bank, bool) or not isinstance(memory_bank, int) or memory_bank != 0
    ):
        raise TensorError(
            f"memory_bank must be None or 0 (host memory has one bank), got {memory_bank!r}"
        )
    gpu = next((device for device in memory if device != HOST), None)
    if gpu is not None and info.tensor_type is TensorType.HW:
        device_memory = cuda_memory.allocate_on(gpu, info.size_in_bytes)
        return NpuTensor._wrap_device(info, device_memory)
    host = HostMemory.shared(info.size_in_bytes, f"copyless:{info.name}", warn_on_leak=False)
    return NpuTensor._wrap_memory(info, host, MemoryType.XRT_BO)


def sub_tensor(parent: NpuTensor, info: NpuTensorInfo, offset: int) -> NpuTensor:
    """A view of ``info`` at byte ``offset`` of ``parent`` (no copy)."""
    if not isinstance(parent, NpuTensor):
        raise TensorError(f"parent must be an NpuTensor, got {type(parent).__name__}")
    if not isinstance(info, NpuTensorInfo):
        raise TensorError(f"info must be an NpuTensorInfo, got {type(info).__name__}")
    return parent._sub_tensor(info, offset)
