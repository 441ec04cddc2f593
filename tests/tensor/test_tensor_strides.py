"""Strided tensor infos (issue 44): byte steps of at least 1, views inside their buffer, and
OUTPUT elements that do not overlap. Before: stride 0 and negative strides were accepted
(``size_in_bytes`` -4; a 2^40-element tensor over 4 KiB)."""

from __future__ import annotations

import numpy as np
import pytest

import copyless as cl
from child_helpers import run_in_child

F32 = cl.DataType.FLOAT32
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT


def _info(shape: tuple[int, ...], strides: tuple[int, ...], direction: cl.TensorDirection = IN,
          dtype: cl.DataType = F32) -> cl.NpuTensorInfo:  # fmt: skip
    return cl.NpuTensorInfo("t", dtype, direction, cl.TensorType.HW, cl.MemoryLayout.GENERIC,
                            shape, strides=strides)  # fmt: skip


def huge_broadcast_over_a_page() -> float:
    """Child: the issue's tensor, 2^40 float32 elements (stride 0) over 4 KiB, summed."""
    info = _info((1 << 40,), (0,))
    tensor = cl.NpuTensor(info, np.zeros(1024, np.float32), cl.MemoryType.USER_POINTER_CMA)
    return float(tensor.numpy().sum())


def test_the_issue_tensor_is_refused_at_once() -> None:
    outcome = run_in_child(huge_broadcast_over_a_page, timeout=30)
    assert outcome.exitcode == 0, outcome  # not a hang over 2^40 elements, not a signal
    assert outcome.error is not None and outcome.error[0] == "TensorError"
    assert "strides [0] must be byte steps >= 1" in outcome.error[1]


@pytest.mark.parametrize(
    ("shape", "strides"),
    [((4,), (0,)), ((4,), (-4,)), ((2, 3), (12, 0)), ((2, 3), (-12, 4)), ((1, 3), (0, 4))],
)
@pytest.mark.parametrize("direction", [IN, OUT])
def test_zero_and_negative_strides_are_refused(
    shape: tuple[int, ...], strides: tuple[int, ...], direction: cl.TensorDirection
) -> None:
    with pytest.raises(cl.TensorError, match="must be byte steps >= 1"):
        _info(shape, strides, direction)


@pytest.mark.parametrize(
    ("shape", "strides"),
    [((3, 3), (4, 4)), ((4,), (2,)), ((2, 3), (8, 4)), ((2, 2, 2), (16, 4, 4)), ((5,), (1,))],
)
def test_overlapping_output_elements_are_refused(
    shape: tuple[int, ...], strides: tuple[int, ...]
) -> None:
    with pytest.raises(cl.TensorError, match="overlap; an OUTPUT view needs each element"):
        _info(shape, strides, OUT)


def test_an_overlapping_input_reads_as_numpy_would() -> None:
    info = _info((3, 3), (4, 4))  # a sliding window: row i is elements i..i+2
    data = np.arange(5, dtype=np.float32)
    assert info.size_in_bytes == 20
    tensor = cl.NpuTensor(info, data, cl.MemoryType.USER_POINTER_CMA)
    np.testing.assert_array_equal(tensor.numpy(), [[0, 1, 2], [1, 2, 3], [2, 3, 4]])


@pytest.mark.parametrize(
    ("shape", "strides", "nbytes"),
    [
        ((2, 3), (32, 4), 44),
        ((3, 2), (4, 12), 24),
        ((2, 1, 3), (64, 4, 8), 84),
        ((1, 4), (4, 4), 16),
    ],
)
def test_gapped_and_transposed_outputs_fit_their_buffer(
    shape: tuple[int, ...], strides: tuple[int, ...], nbytes: int
) -> None:
    info = _info(shape, strides, OUT)
    assert info.size_in_bytes == nbytes
    with pytest.raises(cl.TensorError, match=f"smaller than the {nbytes} bytes"):
        cl.NpuTensor(info, np.zeros(nbytes - 1, np.uint8), cl.MemoryType.USER_POINTER_CMA)
    buffer = np.zeros(nbytes, np.uint8)
    tensor = cl.NpuTensor(info, buffer, cl.MemoryType.USER_POINTER_CMA)
    view = tensor.numpy()
    view[...] = np.arange(view.size, dtype=np.float32).reshape(shape)
    expected = np.lib.stride_tricks.as_strided(buffer.view(np.float32), shape, strides)
    np.testing.assert_array_equal(view, expected)
    offsets = np.lib.stride_tricks.as_strided(np.arange(nbytes, dtype=np.uint8), shape, strides)
    assert len(set(offsets.reshape(-1).tolist())) == view.size  # each element its own bytes


def test_a_received_stride_zero_info_is_refused() -> None:
    from copyless.types import info_from_dict, info_to_dict

    data = info_to_dict(_info((4,), (4,)))
    data["strides"] = [0]
    with pytest.raises(cl.TensorError):
        info_from_dict(data)
