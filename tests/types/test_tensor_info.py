from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest

import copyless as cl

MakeInfo = Callable[..., cl.NpuTensorInfo]


@pytest.mark.parametrize(
    ("shape", "data_type"),
    [
        ((1, 3, 224, 224), cl.DataType.FLOAT32),
        ((224, 1, 224, 1, 4), cl.DataType.UINT8),
        ((2, 7), cl.DataType.BF16),
        ((5,), cl.DataType.INT64),
        ((), cl.DataType.FP16),
        ((4, 0, 3), cl.DataType.INT16),
    ],
)
def test_packed_sizes(make_info: MakeInfo, shape: tuple[int, ...], data_type: cl.DataType) -> None:
    info = make_info(shape, data_type)
    assert info.size == math.prod(shape)
    assert info.size_in_bytes == np.empty(shape, data_type.to_numpy()).nbytes


def test_strided_size_is_the_last_byte_plus_one(make_info: MakeInfo) -> None:
    # A [2,3] float32 view of rows padded to 8 floats: row stride 32 bytes.
    info = make_info((2, 3), cl.DataType.FLOAT32, strides=(32, 4))
    assert info.size == 6
    assert info.size_in_bytes == 32 + 2 * 4 + 4
    base = np.zeros((2, 8), np.float32)
    view = base[:, :3]
    assert view.strides == info.strides
    last = view[-1, -1:].__array_interface__["data"][0] - base.__array_interface__["data"][0]
    assert info.size_in_bytes == last + 4


def test_strided_empty_tensor_needs_no_bytes(make_info: MakeInfo) -> None:
    assert make_info((0, 3), strides=(12, 4)).size_in_bytes == 0


def test_lists_become_tuples_and_infos_hash(make_info: MakeInfo) -> None:
    info = make_info([1, 2, 3, 4], memory_layout_order=[0, 2, 3, 1], strides=[96, 48, 16, 4])
    assert info.shape == (1, 2, 3, 4) and info.memory_layout_order == (0, 2, 3, 1)
    assert info.strides == (96, 48, 16, 4)
    assert hash(info) == hash(
        make_info((1, 2, 3, 4), memory_layout_order=(0, 2, 3, 1), strides=(96, 48, 16, 4))
    )


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"shape": (1, -3)}, cl.TensorError, r"'t': negative dimension in \(1, -3\)"),
        ({"strides": (4,)}, cl.TensorError, "'t': 1 strides for 2 dims"),
        ({"data_type": "FLOAT32"}, TypeError, "data_type must be a DataType"),
        ({"direction": 0}, TypeError, "direction must be a TensorDirection"),
        ({"tensor_type": None}, TypeError, "tensor_type must be a TensorType"),
        ({"memory_layout": "NCHW"}, TypeError, "memory_layout must be a MemoryLayout"),
    ],
)
def test_bad_infos_are_refused(
    make_info: MakeInfo, overrides: dict[str, object], error: type[Exception], message: str
) -> None:
    fields: dict[str, object] = {"shape": (2, 3)}
    fields.update(overrides)
    shape = fields.pop("shape")
    with pytest.raises(error, match=message):
        make_info(shape, **fields)


def test_with_shape_drops_strides(make_info: MakeInfo) -> None:
    info = make_info((4, 3), strides=(32, 4))
    smaller = info.with_shape((2, 3))
    assert smaller.shape == (2, 3) and smaller.strides is None
    assert smaller.name == info.name and smaller.data_type is info.data_type


def test_describe_names_everything(make_info: MakeInfo) -> None:
    text = make_info((1, 3, 8, 8), cl.DataType.UINT8, name="images").describe()
    assert text == "'images' CPU NCHW UINT8 [1, 3, 8, 8]"


def test_quant_parameters() -> None:
    quant = cl.QuantParameters(0.5, 3.0)  # type: ignore[arg-type]
    assert quant.zero_point == 3 and isinstance(quant.zero_point, int)
    assert quant.rounding_mode is cl.RoundingMode.ROUND_TO_NEAREST_EVEN
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(cl.LayoutError, match="scale"):
            cl.QuantParameters(bad)


def test_job_handle() -> None:
    assert cl.JobHandle(cl.StatusCode.SUCCESS, 1).ok
    assert not cl.JobHandle(cl.StatusCode.SUCCESS, 0).ok
    assert not cl.JobHandle(cl.StatusCode.RESOURCE_UNAVAILABLE, 3).ok
    assert cl.JobHandle(cl.StatusCode.FAILURE).job_id == 0


@pytest.mark.parametrize(
    "value",
    [
        cl.NpuTensorInfo(
            "a",
            cl.DataType.INT8,
            cl.TensorDirection.OUTPUT,
            cl.TensorType.HW,
            cl.MemoryLayout.NHWC4,
            (1, 2, 2, 4),
        ),
        cl.QuantParameters(0.25, 1),
        cl.JobHandle(cl.StatusCode.SUCCESS, 7),
    ],
    ids=lambda v: type(v).__name__,
)
def test_metadata_is_frozen_and_slotted(value: object) -> None:
    field = dataclasses.fields(value)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, field, getattr(value, field))
    with pytest.raises((AttributeError, TypeError)):
        value.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(value, "__dict__")
