from __future__ import annotations

import json

import pytest

import copyless as cl
from copyless.types._serialize import info_from_dict, info_to_dict, quant_from_dict, quant_to_dict

INFOS = [
    cl.NpuTensorInfo(
        "input",
        cl.DataType.FLOAT32,
        cl.TensorDirection.INPUT,
        cl.TensorType.CPU,
        cl.MemoryLayout.NCHW,
        (1, 3, 224, 224),
    ),
    cl.NpuTensorInfo(
        "hw",
        cl.DataType.UINT8,
        cl.TensorDirection.INPUT,
        cl.TensorType.HW,
        cl.MemoryLayout.HCWNC4,
        (224, 1, 224, 1, 4),
    ),
    cl.NpuTensorInfo(
        "perm",
        cl.DataType.BF16,
        cl.TensorDirection.OUTPUT,
        cl.TensorType.HW,
        cl.MemoryLayout.GENERIC,
        (3, 5, 2),
        memory_layout_order=(1, 2, 0),
        strides=(40, 8, 2),
    ),
    cl.NpuTensorInfo(
        "scalar",
        cl.DataType.BOOLEAN,
        cl.TensorDirection.OUTPUT,
        cl.TensorType.CPU,
        cl.MemoryLayout.UNKNOWN,
        (),
    ),
]


@pytest.mark.parametrize("info", INFOS, ids=lambda i: i.name)
def test_info_round_trip_through_json(info: cl.NpuTensorInfo) -> None:
    text = json.dumps(info_to_dict(info))
    assert info_from_dict(json.loads(text)) == info


def test_enums_travel_by_name() -> None:
    data = info_to_dict(INFOS[1])
    assert data["data_type"] == "UINT8" and data["memory_layout"] == "HCWNC4"
    assert data["tensor_type"] == "HW" and data["direction"] == "INPUT"


@pytest.mark.parametrize(
    "quant",
    [
        None,
        cl.QuantParameters(0.0078125, -3),
        cl.QuantParameters(2.0, 0, cl.RoundingMode.ROUND_TOWARD_ZERO),
    ],
)
def test_quant_round_trip(quant: cl.QuantParameters | None) -> None:
    assert quant_from_dict(json.loads(json.dumps(quant_to_dict(quant)))) == quant


@pytest.mark.parametrize(
    ("patch", "error"),
    [
        ({"data_type": "FLOAT64"}, KeyError),
        ({"shape": [1, "2"]}, TypeError),
        ({"shape": [1, True]}, TypeError),
        ({"shape": "1,2"}, TypeError),
        ({"strides": [4]}, ValueError),
    ],
)
def test_malformed_dicts_raise(patch: dict[str, object], error: type[Exception]) -> None:
    data = info_to_dict(INFOS[0])
    data.update(patch)
    with pytest.raises(error):
        info_from_dict(data)


def test_missing_key_raises() -> None:
    data = info_to_dict(INFOS[0])
    del data["name"]
    with pytest.raises(KeyError):
        info_from_dict(data)
