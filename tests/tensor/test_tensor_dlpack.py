"""DLPack both ways without copies: numpy imports tensors, tensors import numpy."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import copyless as cl
from copyless.memory import HostMemory

EXPORTABLE = [d for d in cl.DataType if d not in (cl.DataType.UNKNOWN, cl.DataType.BF16)]


def _info(data_type: cl.DataType, shape: tuple[int, ...] = (2, 3, 4)) -> cl.NpuTensorInfo:
    return cl.NpuTensorInfo(
        "d", data_type, cl.TensorDirection.INPUT, cl.TensorType.HW, cl.MemoryLayout.NHW, shape
    )


@pytest.mark.parametrize("data_type", EXPORTABLE, ids=lambda d: d.name)
def test_numpy_imports_a_tensor_without_a_copy(data_type: cl.DataType) -> None:
    info = _info(data_type)
    tensor = cl.NpuTensor._wrap_memory(
        info, HostMemory.shared(info.size_in_bytes), cl.MemoryType.XRT_BO
    )
    assert tensor.__dlpack_device__() == (1, 0)
    imported = np.from_dlpack(tensor)
    assert imported.shape == (2, 3, 4) and imported.dtype == data_type.to_numpy()
    assert np.shares_memory(imported, tensor.numpy())
    imported[1, 2, 3] = 1
    assert tensor.numpy()[1, 2, 3] == 1
    tensor.close()


def test_capsule_keeps_the_memory_alive() -> None:
    info = _info(cl.DataType.INT32)
    tensor = cl.NpuTensor._wrap_memory(
        info, HostMemory.shared(info.size_in_bytes), cl.MemoryType.XRT_BO
    )
    tensor.numpy()[...] = 11
    imported = np.from_dlpack(tensor)
    del tensor
    gc.collect()  # the owner is gone and has closed its memory; the mapping lives on
    assert int(imported.sum()) == 11 * 24
    imported[...] = 0


def test_bf16_export_is_refused_with_buffer_error() -> None:
    tensor = cl.NpuTensor(
        _info(cl.DataType.BF16),
        HostMemory.locked(48, warn_on_leak=False),
        cl.MemoryType.USER_POINTER_CMA,
    )
    with pytest.raises(BufferError, match="bfloat16"):
        np.from_dlpack(tensor)
    assert tensor.numpy().dtype == ml_dtypes.bfloat16  # .numpy() is the BF16 route


def test_import_from_numpy_shares_and_keeps_the_producer() -> None:
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    producer = weakref.ref(array)
    tensor = cl.NpuTensor.from_dlpack(array)
    assert tensor.memory_type is cl.MemoryType.USER_POINTER_NON_CMA
    assert tensor.info.shape == (2, 3, 4) and tensor.info.data_type is cl.DataType.FLOAT32
    assert np.shares_memory(tensor.numpy(), array)
    del array
    gc.collect()
    assert producer() is not None
    assert float(tensor.numpy().sum()) == 276.0
    del tensor
    gc.collect()
    assert producer() is None


def test_import_with_an_info_and_cma() -> None:
    array = np.zeros((2, 3, 4), np.uint8)
    info = _info(cl.DataType.UINT8)
    tensor = cl.NpuTensor.from_dlpack(array, info, cl.MemoryType.USER_POINTER_CMA)
    assert tensor.info is info and np.shares_memory(tensor.numpy(), array)


def test_import_takes_read_only_inputs_and_refuses_strided_producers() -> None:
    frozen = np.arange(8, dtype=np.float32)
    frozen.flags.writeable = False
    tensor = cl.NpuTensor.from_dlpack(frozen)  # an INPUT info: wrapped without a copy
    assert tensor.get_virtual_address() == frozen.ctypes.data
    out = dataclasses.replace(tensor.info, direction=cl.TensorDirection.OUTPUT)
    with pytest.raises(cl.TensorError, match="read-only"):
        cl.NpuTensor.from_dlpack(frozen, out)
    with pytest.raises(cl.TensorError, match="not C-contiguous"):
        cl.NpuTensor.from_dlpack(np.zeros((4, 4), np.float32)[:, 1])


def test_import_refuses_bf16_and_device_producers() -> None:
    with pytest.raises(cl.TensorError, match="cannot import ndarray through DLPack"):
        cl.NpuTensor.from_dlpack(np.zeros(4, ml_dtypes.bfloat16))

    class OnGpu:
        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, **kwargs: Any) -> Any:
            raise AssertionError("must not be asked for its memory")

    with pytest.raises(cl.TensorError, match="lives on DLPack device 2, not the host"):
        cl.NpuTensor.from_dlpack(OnGpu())


def test_round_trip_tensor_to_tensor() -> None:
    source = cl.NpuTensor.from_numpy(np.ones((2, 3), np.int64))
    again = cl.NpuTensor.from_dlpack(source)
    assert np.shares_memory(again.numpy(), source.numpy())
