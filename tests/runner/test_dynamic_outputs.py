"""Outputs whose shape depends on the data, through the Runner on every CPU backend:
changing shapes over many calls, sync and async with several jobs in flight, the shape
produced on the tensor when the job ends, too small -> INVALID_OUTPUT -> recovery, and the
bad tensors that are refused."""

from __future__ import annotations

import dataclasses
import gc
import logging
import re
import threading
import weakref

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import copyless as cl
from copyless.model import CompiledModel, compile_to_memory
from model_helpers import nonzero_net, unknown_rank_model, with_nonzeros

IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
HW, CPU = cl.TensorType.HW, cl.TensorType.CPU
S = cl.StatusCode


@pytest.fixture(scope="module")
def nonzero() -> CompiledModel:
    return compile_to_memory(nonzero_net())


def _fill(x: cl.NpuTensor, count: int, seed: int) -> np.ndarray:
    """Put ``count`` non-zeros at random places in ``x``; NonZero's expected result."""
    return with_nonzeros(x.numpy(), count, seed)


def _tensors(runner, capacity=(2, 12), view=HW):
    x = runner.allocate_npu_tensor(runner.get_tensors_info(IN, view)[0])
    nz_info, r_info = runner.get_tensors_info(OUT, view)
    nz = runner.allocate_npu_tensor(dataclasses.replace(nz_info, shape=capacity))
    return x, nz, runner.allocate_npu_tensor(r_info)


def _result(nz: cl.NpuTensor) -> np.ndarray:
    """The produced result: C-contiguous at the start of the buffer."""
    assert nz.produced_shape is not None
    view = nz.produced()
    assert view.shape == nz.produced_shape
    assert view.size == 0 or np.shares_memory(view, nz.numpy())  # a view, no copy
    return view


def test_infos_report_the_capacity(nonzero, make_runner) -> None:
    runner = make_runner(nonzero)
    nz_info = runner.get_tensor_info_by_name("nz")
    assert nz_info.shape == (2, 12) and nz_info.bounded
    tensor = runner.allocate_npu_tensor(nz_info)  # the derived bound, as reported
    assert tensor.produced_shape is None and tensor.info.size_in_bytes == 2 * 12 * 8


@pytest.mark.parametrize("view", [HW, CPU], ids=["hw", "cpu"])
def test_changing_shapes_over_many_sync_calls(nonzero, make_runner, view) -> None:
    runner = make_runner(nonzero)
    x, nz, r = _tensors(runner, view=view)
    for step, count in enumerate([3, 3, 5, 1, 12, 0, 7, 7, 2, 11, 4, 9]):
        expected = _fill(x, count, step)
        assert runner.execute([[x]], [[nz, r]]) is S.SUCCESS
        assert nz.produced_shape == (2, count)
        np.testing.assert_array_equal(_result(nz), expected)
        np.testing.assert_array_equal(r.numpy(), x.numpy())
        assert r.produced_shape is None  # a fixed output has no produced shape


def test_many_async_jobs_in_flight_with_different_shapes(nonzero, make_runner) -> None:
    runner = make_runner(nonzero, max_concurrent_runs=4)
    sets = [_tensors(runner) for _ in range(4)]
    seen: dict[int, tuple[int, ...] | None] = {}
    lock = threading.Lock()
    for round_ in range(3):
        handles = {}
        for i, (x, nz, r) in enumerate(sets):
            count = (i * 3 + round_ * 5) % 13
            expected = _fill(x, count, 100 * round_ + i)

            def record(handle, nz=nz):
                with lock:  # the shape is set before the callback runs
                    seen[handle.job_id] = nz.produced_shape

            handle = runner.execute_async([[x]], [[nz, r]], record)
            assert handle.status is S.SUCCESS
            handles[handle.job_id] = (handle, nz, expected)
        for job_id, (handle, nz, expected) in handles.items():
            assert runner.wait(handle, 10_000) is S.SUCCESS
            assert seen[job_id] == nz.produced_shape == expected.shape
            np.testing.assert_array_equal(_result(nz), expected)


def test_too_small_then_recover(nonzero, make_runner, caplog) -> None:
    runner = make_runner(nonzero)
    x, nz, r = _tensors(runner, capacity=(2, 4))
    caplog.set_level(logging.ERROR, logger="copyless")
    for step, (count, status) in enumerate(
        [
            (3, S.SUCCESS),
            (9, S.INVALID_OUTPUT),
            (4, S.SUCCESS),
            (12, S.INVALID_OUTPUT),
            (1, S.SUCCESS),
        ]
    ):
        caplog.clear()
        expected = _fill(x, count, step)
        assert runner.execute([[x]], [[nz, r]]) is status
        assert nz.produced_shape == (2, count)  # the shape needed, when it did not fit
        if status is S.SUCCESS:
            np.testing.assert_array_equal(_result(nz), expected)
            assert not caplog.records
        else:
            (record,) = caplog.records
            assert "'nz'" in record.getMessage()
            assert (
                f"{2 * count * 8} bytes" in record.getMessage()
                and "64 bytes" in record.getMessage()
            )
            with pytest.raises(cl.TensorError, match=r"produced shape \[2, \d+\] does not fit"):
                nz.produced()
    # The same sequence asynchronously: the runner keeps working after INVALID_OUTPUT.
    for step, (count, status) in enumerate([(9, S.INVALID_OUTPUT), (2, S.SUCCESS)]):
        expected = _fill(x, count, step)
        handle = runner.execute_async([[x]], [[nz, r]])
        assert runner.wait(handle, 10_000) is status
        assert nz.produced_shape == (2, count)
    np.testing.assert_array_equal(_result(nz), expected)
    # A bigger tensor for the same output then takes the big result.
    _, big, _ = _tensors(runner, capacity=(2, 12))
    expected = _fill(x, 12, 7)
    assert runner.execute([[x]], [[big, r]]) is S.SUCCESS
    np.testing.assert_array_equal(_result(big), expected)


def test_unknown_rank_reads_minus_one_and_takes_a_flat_capacity(make_runner, runner_type) -> None:
    compiled = compile_to_memory(unknown_rank_model())
    if runner_type is cl.RunnerType.OPENVINO:  # a limit of OpenVINO's CPU plugin, said so
        with pytest.raises(cl.UnsupportedError, match="If operation with dynamic rank"):
            make_runner(compiled)
        return
    runner = make_runner(compiled)
    info = runner.get_tensor_info_by_name("nz")
    assert info.shape == (-1,) and not info.bounded and info.size == -1
    with pytest.raises(cl.TensorError, match="capacity"):
        runner.allocate_npu_tensor(info)
    x, flat = (runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(IN))
    nz = runner.allocate_npu_tensor(dataclasses.replace(info, shape=(30,)))
    r = runner.allocate_npu_tensor(runner.get_tensor_info_by_name("r"))
    for step, (count, as_flat) in enumerate([(5, False), (6, True), (12, False), (3, True)]):
        expected = _fill(x, count, step)
        expected = expected.reshape(-1) if as_flat else expected
        flat.numpy()[...] = as_flat
        assert runner.execute([[x, flat]], [[nz, r]]) is S.SUCCESS
        assert nz.produced_shape == expected.shape
        np.testing.assert_array_equal(_result(nz), expected)


def test_dtype_conversion_of_a_cpu_view(make_runner) -> None:
    model = nonzero_net()
    model.graph.node.append(oh.make_node("Compress", ["x", "keep"], ["picked"], axis=1))
    model.graph.input.append(oh.make_tensor_value_info("keep", onnx.TensorProto.BOOL, [4]))
    model.graph.output.append(oh.make_tensor_value_info("picked", onnx.TensorProto.FLOAT, None))
    compiled = compile_to_memory(model, output_dtype={"picked": "fp16"})
    runner = make_runner(compiled)
    spec = {s.name: s for s in compiled.outputs}["picked"]
    assert spec.dynamic and spec.hw.data_type is cl.DataType.FP16
    assert spec.cpu.shape == (3, 4) and spec.cpu.data_type is cl.DataType.FLOAT32
    x, keep = (runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(IN, HW))
    nz = runner.allocate_npu_tensor(runner.get_tensor_info_by_name("nz"))
    r = runner.allocate_npu_tensor(runner.get_tensor_info_by_name("r"))
    cpu = runner.allocate_npu_tensor(runner.get_tensor_info_by_name("picked", CPU))
    hw = runner.allocate_npu_tensor(runner.get_tensor_info_by_name("picked", HW))
    x.numpy()[...] = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
    for mask in ([True, False, True, True], [False, True, False, False]):
        keep.numpy()[...] = mask
        expected = x.numpy()[:, mask]
        for out in (cpu, hw):  # converted into a CPU view, written in place in a HW view
            assert runner.execute([[x, keep]], [[nz, r, out]]) is S.SUCCESS
            assert out.produced_shape == expected.shape
            np.testing.assert_allclose(_result(out).astype(np.float32), expected, atol=1e-3)


def test_one_tensor_holds_a_batchs_result(make_runner) -> None:
    compiled = compile_to_memory(nonzero_net(batch="N"), batch_size=2)
    runner = make_runner(compiled)
    assert runner.get_tensor_info_by_name("nz").shape == (2, 8)
    frames = [runner.allocate_npu_tensor(dataclasses.replace(i, shape=(1, 4)))
              for i in runner.get_tensors_info(IN) for _ in range(2)]  # fmt: skip
    x = runner.allocate_npu_tensor(runner.get_tensors_info(IN)[0])
    nz = runner.allocate_npu_tensor(runner.get_tensor_info_by_name("nz"))
    r = runner.allocate_npu_tensor(runner.get_tensor_info_by_name("r"))
    expected = _fill(x, 5, 0)
    assert runner.execute([[x]], [[nz, r]]) is S.SUCCESS
    np.testing.assert_array_equal(_result(nz), expected)
    halves = [
        runner.allocate_npu_tensor(dataclasses.replace(r.info, shape=(1, 4))) for _ in range(2)
    ]
    for frame, row in zip(frames, x.numpy(), strict=True):
        frame.numpy()[...] = row
    rows = [[frames[0]], [frames[1]]]
    assert runner.execute(rows, [[nz, halves[0]], [nz, halves[1]]]) is S.SUCCESS
    np.testing.assert_array_equal(_result(nz), expected)
    other = runner.allocate_npu_tensor(runner.get_tensor_info_by_name("nz"))
    assert runner.execute(rows, [[nz, halves[0]], [other, halves[1]]]) is S.INVALID_OUTPUT


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"data_type": cl.DataType.INT32}, "INT32"),
        ({"memory_layout": cl.MemoryLayout.GENERIC}, "GENERIC"),
        ({"shape": (3, 12)}, r"\[3, 12\]"),
        ({"shape": (24,)}, r"\[24\]"),
        ({"strides": (8 * 24, 8)}, "packed"),
    ],
    ids=["dtype", "layout", "fixed-dim", "rank", "strided"],
)
def test_bad_output_tensors_are_refused_by_name(nonzero, make_runner, caplog, change, why) -> None:
    runner = make_runner(nonzero)
    x, nz, r = _tensors(runner)
    info = dataclasses.replace(nz.info, **change)
    buffer = np.zeros(max(info.size_in_bytes, 8 * 24 * 2), np.uint8)
    bad = cl.NpuTensor(info, buffer, cl.MemoryType.USER_POINTER_CMA)
    caplog.set_level(logging.ERROR, logger="copyless")
    assert runner.execute([[x]], [[bad, r]]) is S.INVALID_OUTPUT
    assert runner.execute_async([[x]], [[bad, r]]).status is S.INVALID_OUTPUT
    message = caplog.records[0].getMessage()
    assert "'nz'" in message and re.search(why, message)
    _fill(x, 4, 0)
    assert runner.execute([[x]], [[nz, r]]) is S.SUCCESS  # and the runner goes on


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_too_small_output_keeps_no_tensor_alive(nonzero, make_runner, caplog, mode) -> None:
    """No reference cycle through the error (nor its log record) holds the call's tensors:
    their memory goes with the last reference, without waiting for a gc pass."""
    caplog.set_level(logging.ERROR, logger="copyless")
    runner = make_runner(nonzero)
    x, nz, r = _tensors(runner, capacity=(2, 1))
    _fill(x, 5, 0)
    gc.disable()
    try:
        if mode == "sync":
            assert runner.execute([[x]], [[nz, r]]) is S.INVALID_OUTPUT
        else:
            assert runner.wait(runner.execute_async([[x]], [[nz, r]]), 10_000) is S.INVALID_OUTPUT
        refs = [weakref.ref(t) for t in (x, nz, r)]
        del x, nz, r
        assert [ref() for ref in refs] == [None, None, None]
    finally:
        gc.enable()
