"""Device memory behind NpuTensor: producers parsed, checked and exported without CUDA.

These run on any machine: ``__cuda_array_interface__`` producers here are fakes over host
bytes whose pointer is declared device memory (``pointer_device`` is the one thing replaced:
asking CUDA needs a GPU), and nothing ever dereferences them as device memory. The real
producers (CuPy, PyTorch) are exercised by the ``cuda``-marked tests.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

import copyless as cl
from copyless.memory import _device as dev
from copyless.memory._device import DeviceMemory

CMA = cl.MemoryType.USER_POINTER_CMA


class FakeCai:
    """A ``__cuda_array_interface__`` v3 producer over (never dereferenced) host bytes."""

    def __init__(self, array: np.ndarray, **overrides: Any) -> None:
        self.array = array
        self.interface: dict[str, Any] = {
            "shape": array.shape,
            "typestr": array.dtype.str,
            "data": (array.ctypes.data, False),
            "strides": None,
            "version": 3,
            "stream": None,
        }
        self.interface.update(overrides)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self.interface


class FakeDLPack:
    def __init__(self, device: tuple[int, int]) -> None:
        self.device = device

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise BufferError("fake")

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


@pytest.fixture
def on_gpu(monkeypatch) -> dict[int, int]:
    """Declare pointers device memory: ``on_gpu[ptr] = device_id`` (others are host)."""
    devices: dict[int, int] = {}
    monkeypatch.setattr(dev, "pointer_device", devices.get)
    return devices


def info(shape=(2, 3), direction=cl.TensorDirection.INPUT, dtype=cl.DataType.FLOAT32):
    return cl.NpuTensorInfo(
        "x", dtype, direction, cl.TensorType.HW, cl.MemoryLayout.GENERIC, shape
    )


def test_cuda_array_interface_is_parsed_without_a_copy(on_gpu) -> None:
    array = np.zeros((2, 3), np.float32)
    on_gpu[array.ctypes.data] = 1
    producer = FakeCai(array, stream=0x77, data=(array.ctypes.data, True))
    memory = dev.wrap_device(producer, "x")
    assert memory == DeviceMemory(array.ctypes.data, 24, 1, producer, 0x77, True)
    assert memory.device == "cuda:1"
    # Packed strides are fine; strides that skip bytes are not.
    packed = FakeCai(array, strides=(12, 4))
    assert dev.wrap_device(packed, "x").nbytes == 24


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"strides": (4, 8)}, "strides"),
        ({"mask": object()}, "masked"),
        ({"stream": 0}, "disallows 0"),
        ({"stream": "1"}, "stream"),
        ({"typestr": "not-a-type"}, "malformed"),
        ({"data": None}, "malformed"),
    ],
)
def test_bad_interfaces_are_refused_naming_the_tensor(on_gpu, overrides, fragment) -> None:
    array = np.zeros((2, 3), np.float32)
    on_gpu[array.ctypes.data] = 0
    with pytest.raises(cl.TensorError, match=fragment) as exc:
        dev.wrap_device(FakeCai(array, **overrides), "x")
    assert "'x'" in str(exc.value)


def test_an_interface_pointing_at_host_memory_is_refused(on_gpu) -> None:
    array = np.zeros(4, np.float32)
    with pytest.raises(cl.TensorError, match="points at host memory"):
        dev.wrap_device(FakeCai(array), "x")
    with pytest.raises(cl.TensorError, match="lacks shape"):
        dev.wrap_device(_Broken(), "x")


class _Broken:
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (1,)}


def test_which_objects_count_as_device_producers() -> None:
    array = np.zeros(4, np.float32)
    assert not dev.is_device_producer(array)  # numpy: DLPack on the CPU
    assert not dev.is_device_producer(cl.NpuTensor.from_numpy(array))
    assert not dev.is_device_producer(bytearray(4))
    assert dev.is_device_producer(FakeCai(array))
    assert dev.is_device_producer(FakeDLPack((dev.DLPACK_CUDA, 0)))
    assert dev.is_device_producer(FakeDLPack((dev.DLPACK_CUDA_MANAGED, 0)))
    assert not dev.is_device_producer(FakeDLPack((1, 0)))
    assert dev.is_device_producer(DeviceMemory(0x1000, 4, 0))


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
def test_a_cuda_dlpack_producer_without_cupy_names_the_install() -> None:
    with pytest.raises(cl.UnsupportedError, match=r"needs CuPy .*copyless\[cuda\]"):
        cl.NpuTensor(info(), FakeDLPack((dev.DLPACK_CUDA, 0)), CMA)
    with pytest.raises(cl.UnsupportedError, match="CuPy"):
        dev.allocate_on("cuda:0", 16)


def test_a_dlpack_producer_on_the_host_is_no_device_memory() -> None:
    with pytest.raises(cl.TensorError, match="DLPack device 1, not CUDA"):
        dev.wrap_device(FakeDLPack((1, 0)), "x")
    with pytest.raises(cl.TensorError, match="cannot allocate"):
        dev.allocate_on("cpu", 16)


def test_device_tensor_accessors_never_touch_the_bytes() -> None:
    memory = DeviceMemory(0x7F0000001000, 24, 0)
    tensor = cl.NpuTensor(info(), memory, CMA)
    assert (tensor.device, tensor.address, tensor.nbytes) == ("cuda:0", memory.ptr, 24)
    assert tensor.get_virtual_address() == memory.ptr
    assert tensor.device_memory is memory and tensor.get_buffer() is memory
    assert tensor.__dlpack_device__() == (dev.DLPACK_CUDA, 0)
    assert tensor.__cuda_array_interface__ == {
        "shape": (2, 3),
        "typestr": "<f4",
        "data": (memory.ptr, False),
        "strides": None,
        "version": 3,
        "stream": None,
    }
    assert tensor.export_buffer() == -1
    tensor.sync_buffer()  # always callable
    with pytest.raises(cl.TensorError, match=r"device memory \(cuda:0\)"):
        tensor.numpy()
    with pytest.raises(cl.TensorError, match="device memory"):
        tensor.bytes_view()
    assert "on cuda:0" in repr(tensor)
    tensor.close()
    assert tensor.closed and tensor.get_buffer() is None and tensor.get_virtual_address() == 0
    assert tensor.device_memory is None
    host = cl.NpuTensor.from_numpy(np.zeros(4, np.float32))
    assert not hasattr(host, "__cuda_array_interface__") and host.device == "cpu"


def test_device_tensors_are_checked_like_host_ones() -> None:
    memory = DeviceMemory(0x1000, 24, 0)
    with pytest.raises(cl.MemoryTypeError, match="USER_POINTER_CMA"):
        cl.NpuTensor(info(), memory, cl.MemoryType.USER_POINTER_NON_CMA)
    with pytest.raises(cl.TensorError, match="smaller than"):
        cl.NpuTensor(info((4, 3)), memory, CMA)
    readonly = DeviceMemory(0x1000, 24, 0, readonly=True)
    cl.NpuTensor(info(), readonly, CMA)  # an INPUT may be read-only
    with pytest.raises(cl.TensorError, match="read-only"):
        cl.NpuTensor(info(direction=cl.TensorDirection.OUTPUT), readonly, CMA)


def test_device_sub_tensors_move_the_pointer_and_keep_the_parent() -> None:
    parent = cl.NpuTensor(info((4, 3)), DeviceMemory(0x1000, 48, 2), cl.MemoryType.XRT_BO)
    sub = parent._sub_tensor(info((1, 3)), 24)
    assert (sub.address, sub.device, sub.parent, sub.offset) == (0x1018, "cuda:2", parent, 24)
    assert sub.device_memory is not None and sub.device_memory.owner is parent.device_memory
    for offset in (2, 48, -4):
        with pytest.raises(cl.TensorError, match="offset"):
            parent._sub_tensor(info((1, 3)), offset)
    with pytest.raises(cl.TensorError, match="nesting"):
        sub._sub_tensor(info((1, 1)), 0)
