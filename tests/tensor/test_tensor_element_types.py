"""NpuTensor's element-type rule (issue 40): a typed buffer must hold ``info.data_type``
elements; raw bytes are taken as bytes, whatever the info's type.

Before, only byte sizes were checked: a float64 array of the same bytes under a FLOAT32 info
was accepted and ``execute`` returned SUCCESS on garbage; an int32 output array too.
"""

from __future__ import annotations

import array
import ctypes
import mmap
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import copyless as cl
from copyless.memory import HostMemory

MakeInfo = Callable[..., cl.NpuTensorInfo]
NON_CMA = cl.MemoryType.USER_POINTER_NON_CMA
OUTPUT = cl.TensorDirection.OUTPUT


@pytest.mark.parametrize(
    ("make_buffer", "holds"),
    [
        (lambda n: np.zeros(n // 8, np.float64), "float64"),
        (lambda n: np.zeros(n // 4, np.int32), "int32"),
        (lambda n: np.zeros(n // 2, np.float16), "float16"),
        (lambda n: np.zeros(n // 4, ">f4"), ">f4"),  # float32, but the other byte order
        (lambda n: np.zeros(n, np.int8), "int8"),
        (lambda n: memoryview(np.zeros(n // 8, np.float64)), "float64"),
        (lambda n: array.array("d", bytes(n)), "float64"),
        (lambda n: (ctypes.c_int32 * (n // 4))(), "int32"),
    ],
    ids=[
        "f64-array",
        "i32-array",
        "f16-array",
        "big-endian-f32",
        "i8-array",
        "f64-memoryview",
        "array.array-d",
        "ctypes-int32",
    ],
)
@pytest.mark.parametrize("direction", list(cl.TensorDirection), ids=lambda d: d.name)
def test_a_typed_buffer_of_another_element_type_is_refused(
    make_info: MakeInfo, make_buffer: Callable[[int], Any], holds: str,
    direction: cl.TensorDirection,
) -> None:  # fmt: skip
    info = make_info((1, 3, 8, 8), direction=direction)  # FLOAT32, 768 bytes
    with pytest.raises(cl.TensorError, match=rf"'t': the .* holds {holds} elements, the info "
                       r"says FLOAT32 \(float32\)"):  # fmt: skip
        cl.NpuTensor(info, make_buffer(info.size_in_bytes), NON_CMA)


@pytest.mark.parametrize(
    "make_buffer",
    [
        lambda n: np.zeros(n, np.uint8),
        lambda n: np.zeros(n // 4, "V4"),
        lambda n: np.zeros(n, "S1"),
        lambda n: bytearray(n),
        lambda n: mmap.mmap(-1, n),
        lambda n: memoryview(bytearray(n)),
        lambda n: (ctypes.c_char * n)(),
        lambda n: HostMemory.pageable(n, warn_on_leak=False),
    ],
    ids=[
        "uint8",
        "void",
        "S1",
        "bytearray",
        "mmap",
        "byte-memoryview",
        "ctypes-char",
        "HostMemory",
    ],
)
@pytest.mark.parametrize("data_type", [cl.DataType.FLOAT32, cl.DataType.INT8, cl.DataType.BF16])
def test_raw_bytes_are_taken_as_bytes(
    make_info: MakeInfo, make_buffer: Callable[[int], Any], data_type: cl.DataType
) -> None:
    info = make_info((1, 3, 8, 8), data_type, direction=OUTPUT)
    buffer = make_buffer(info.size_in_bytes)
    with cl.NpuTensor(info, buffer, NON_CMA) as tensor:
        assert tensor.numpy().dtype == data_type.to_numpy()


def test_bytes_stay_accepted_for_an_input(make_info: MakeInfo) -> None:
    info = make_info((1, 3, 8, 8))
    data = np.arange(192, dtype=np.float32).tobytes()
    with cl.NpuTensor(info, data, NON_CMA) as tensor:
        assert tensor.numpy().reshape(-1)[191] == 191.0


@pytest.mark.parametrize("data_type", [t for t in cl.DataType if t is not cl.DataType.UNKNOWN])
def test_an_array_of_the_info_s_own_type_wraps(make_info: MakeInfo, data_type: cl.DataType) -> None:
    info = make_info((2, 3), data_type, memory_layout=cl.MemoryLayout.NC)
    buffer = np.zeros(info.shape, data_type.to_numpy())
    with cl.NpuTensor(info, buffer, NON_CMA) as tensor:
        assert np.shares_memory(tensor.numpy(), buffer)


def test_the_wrong_array_never_reaches_execute(tmp_path) -> None:
    """The issue's case end to end (execute used to return SUCCESS on the garbage)."""
    from model_helpers import conv_net

    rai = cl.compile_model(conv_net(1, 8), tmp_path / "m.rai")
    with cl.RunnerFactory.create_runner(rai) as runner:
        (x_info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.CPU)
        (y_info,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.CPU)
        as_f64 = np.zeros(x_info.size_in_bytes // 8, np.float64)
        with pytest.raises(cl.TensorError, match="float64 elements"):
            cl.NpuTensor(x_info, as_f64, NON_CMA)
        with pytest.raises(cl.TensorError, match="int32 elements"):
            cl.NpuTensor(y_info, np.zeros(y_info.shape, np.int32), NON_CMA)
        x = cl.NpuTensor(x_info, as_f64.view(np.uint8), NON_CMA)  # its bytes: the user's call
        y = cl.NpuTensor(y_info, np.zeros(y_info.shape, np.float32), NON_CMA)
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS


def test_device_arrays_follow_the_same_rule(make_info: MakeInfo, monkeypatch) -> None:
    from copyless.memory import _device as dev

    host = np.zeros(192, np.float64)
    monkeypatch.setattr(dev, "pointer_device", {host.ctypes.data: 0}.get)

    class Cai:
        __cuda_array_interface__ = {  # noqa: RUF012 - a fake producer's interface
            "shape": host.shape, "typestr": host.dtype.str, "data": (host.ctypes.data, False),
            "version": 3, "strides": None, "stream": None,
        }  # fmt: skip

    info = make_info((1, 3, 8, 8), tensor_type=cl.TensorType.HW)
    with pytest.raises(cl.TensorError, match="'t': the Cai device array holds float64"):
        cl.NpuTensor(info, Cai(), cl.MemoryType.USER_POINTER_CMA)
