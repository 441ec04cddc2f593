from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import copyless as cl

EXPECTED = {
    cl.DataType.BOOLEAN: np.bool_,
    cl.DataType.INT8: np.int8,
    cl.DataType.UINT8: np.uint8,
    cl.DataType.INT16: np.int16,
    cl.DataType.UINT16: np.uint16,
    cl.DataType.BF16: ml_dtypes.bfloat16,
    cl.DataType.FP16: np.float16,
    cl.DataType.INT32: np.int32,
    cl.DataType.UINT32: np.uint32,
    cl.DataType.FLOAT32: np.float32,
    cl.DataType.INT64: np.int64,
    cl.DataType.UINT64: np.uint64,
}


def test_every_member_but_unknown_has_a_numpy_dtype() -> None:
    assert set(EXPECTED) == set(cl.DataType) - {cl.DataType.UNKNOWN}


@pytest.mark.parametrize("member", sorted(EXPECTED, key=lambda m: m.value), ids=lambda m: m.name)
def test_round_trip(member: cl.DataType) -> None:
    dtype = member.to_numpy()
    assert dtype == np.dtype(EXPECTED[member])
    assert cl.DataType.from_numpy(dtype) is member
    assert cl.DataType.from_numpy(EXPECTED[member]) is member  # scalar types too
    assert member.itemsize == np.dtype(EXPECTED[member]).itemsize


def test_unknown_has_no_dtype() -> None:
    with pytest.raises(ValueError, match="UNKNOWN"):
        cl.DataType.UNKNOWN.to_numpy()


@pytest.mark.parametrize("dtype", [np.float64, np.complex64, "U4", np.dtype([("a", "i4")])])
def test_foreign_dtypes_are_refused(dtype: object) -> None:
    with pytest.raises(ValueError, match="no copyless DataType"):
        cl.DataType.from_numpy(dtype)


def test_kind_predicates() -> None:
    floats = {m for m in cl.DataType if m.is_float}
    ints = {m for m in cl.DataType if m.is_integer}
    assert floats == {cl.DataType.FLOAT32, cl.DataType.FP16, cl.DataType.BF16}
    assert cl.DataType.BOOLEAN not in ints and cl.DataType.UNKNOWN not in ints
    assert len(ints) == 8
