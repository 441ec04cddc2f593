"""An NpuTensor is an info over a span (owner, offset, size, device), host and device memory
alike (CuPy's model): one sub-tensor path, "closed" means no span, and the runner's C fast
path checks the span, so device tensors replay like host ones."""

from __future__ import annotations

import numpy as np
import pytest

import copyless as cl
from copyless.memory import DeviceMemory, HostMemory
from copyless.runner._fast import FastPath

F32 = cl.DataType.FLOAT32


def _info(
    name: str, shape: tuple[int, ...], direction=cl.TensorDirection.INPUT
) -> cl.NpuTensorInfo:
    return cl.NpuTensorInfo(name, F32, direction, cl.TensorType.HW, cl.MemoryLayout.GENERIC, shape)


def _host(nbytes: int) -> cl.NpuTensor:
    memory = HostMemory.shared(nbytes, "span-test")
    return cl.NpuTensor._wrap_memory(_info("pool", (nbytes // 4,)), memory, cl.MemoryType.XRT_BO)


def _device(nbytes: int, device_id: int = 1) -> cl.NpuTensor:
    memory = DeviceMemory(0x10000, nbytes, device_id)  # a pointer never dereferenced here
    return cl.NpuTensor(_info("pool", (nbytes // 4,)), memory, cl.MemoryType.XRT_BO)


@pytest.mark.parametrize("make", [_host, _device], ids=["host", "device"])
def test_host_and_device_tensors_are_spans_with_one_sub_tensor_path(make) -> None:
    parent = make(64)
    span = parent.span
    assert span is not None and (span.offset, span.size) == (0, 64)
    assert span.ptr == parent.address and span.device == parent.device
    sub = parent._sub_tensor(_info("tail", (4,)), 48)
    assert (sub.span.offset, sub.span.size, sub.nbytes) == (48, 16, 16)
    assert sub.address == parent.address + 48 and sub.device == parent.device
    assert sub.parent is parent and sub.offset == 48
    for offset, message in [(52, r"bytes \[52, 68\) exceed"), (2, "multiple"), (-4, ">= 0")]:
        with pytest.raises(cl.TensorError, match=message):
            parent._sub_tensor(_info("bad", (4,)), offset)
    with pytest.raises(cl.TensorError, match="one nesting level"):
        sub._sub_tensor(_info("deeper", (1,)), 0)
    sub.close()
    assert sub.closed and sub.span is None and sub.nbytes == 0 and not parent.closed
    parent.close()
    assert parent.closed and parent.span is None
    with pytest.raises(cl.TensorError, match="'pool' is closed"):
        _ = parent.address


def test_a_read_only_span_takes_no_output_sub_tensor() -> None:
    frozen = np.zeros(16, np.float32)
    frozen.flags.writeable = False
    parent = cl.NpuTensor(_info("pool", (16,)), frozen, cl.MemoryType.USER_POINTER_CMA)
    assert parent.span is not None and not parent.span.writable
    with pytest.raises(cl.TensorError, match="needs writable memory"):
        parent._sub_tensor(_info("out", (4,), cl.TensorDirection.OUTPUT), 0)
    readonly = DeviceMemory(0x10000, 64, 0, readonly=True)
    device = cl.NpuTensor(_info("pool", (16,)), readonly, cl.MemoryType.USER_POINTER_CMA)
    with pytest.raises(cl.TensorError, match="needs writable memory"):
        device._sub_tensor(_info("out", (4,), cl.TensorDirection.OUTPUT), 0)


@pytest.mark.parametrize("make", [_host, _device], ids=["host", "device"])
def test_the_fast_path_replays_a_call_until_a_tensor_closes(make) -> None:
    """The C fast path reads each tensor's span: a device tensor's call is replayed too (it
    used to read a host-only attribute, so device calls were installed and never taken)."""
    calls: list[int] = []
    x, y = make(64), make(64)
    path = FastPath(cl.StatusCode.SUCCESS)
    assert path.install((x, y), (1, 1), (1, 1), ((calls.append, (1,)),), None) == 0
    for _ in range(3):
        assert path([[x]], [[y]]) is cl.StatusCode.SUCCESS
    assert (calls, path.count) == ([1, 1, 1], 3)
    y.close()
    assert path([[x]], [[y]]) is None  # closed: the Python path answers
    assert calls == [1, 1, 1]
