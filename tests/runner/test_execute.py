"""Synchronous execution: zero-copy HW binding, CPU-view conversion, batches, statuses."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from runner_helpers import conv_net, reference, tensors

import copyless as cl
from copyless.model import compile_to_memory

HW, CPU = cl.TensorType.HW, cl.TensorType.CPU
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT


def test_hw_execute_matches_onnxruntime_and_writes_in_place(tiny, make_runner) -> None:
    model, compiled = tiny
    runner = make_runner(compiled)
    x, y = tensors(runner, HW)
    data = np.random.default_rng(1).standard_normal(x.info.shape).astype(np.float32)
    x.numpy()[...] = data
    view_before = y.numpy()
    address = y.get_virtual_address()
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    (expected,) = reference(model, {"input": data})
    np.testing.assert_allclose(view_before, expected, rtol=1e-4, atol=1e-4)
    assert y.get_virtual_address() == address
    assert runner.get_property("bytes_converted") == 0  # HW views: nothing converted


def test_user_numpy_buffers_are_bound_in_place(tiny, make_runner) -> None:
    model, compiled = tiny
    runner = make_runner(compiled)
    in_info = runner.get_tensors_info(IN, HW)[0]
    out_info = runner.get_tensors_info(OUT, HW)[0]
    x_mem = np.random.default_rng(2).standard_normal(in_info.shape).astype(np.float32)
    y_mem = np.full(out_info.shape, np.nan, np.float32)
    x = cl.NpuTensor(in_info, x_mem, cl.MemoryType.USER_POINTER_CMA)
    y = cl.NpuTensor(out_info, y_mem, cl.MemoryType.USER_POINTER_CMA)
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    (expected,) = reference(model, {"input": x_mem})
    np.testing.assert_allclose(y_mem, expected, rtol=1e-4, atol=1e-4)


def test_hw_execute_allocates_far_less_than_the_tensors(make_runner) -> None:
    model = conv_net(size=512)
    runner = make_runner(compile_to_memory(model))
    x, y = tensors(runner, HW)
    x.numpy()[...] = 1.0
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS  # warm: plans, bindings
    tracemalloc.start()
    for _ in range(5):
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < x.info.size_in_bytes // 50, f"{peak} bytes allocated per run"


def test_cpu_view_is_converted_inside(tiny_rgbx, make_runner) -> None:
    model, compiled = tiny_rgbx
    runner = make_runner(compiled, input_tensor_type="CPU", output_tensor_type="CPU")
    x, y = tensors(runner, CPU)
    assert x.info.data_type is cl.DataType.FLOAT32 and x.info.shape == (1, 3, 16, 16)
    pixels = np.random.default_rng(3).integers(0, 256, x.info.shape).astype(np.float32)
    x.numpy()[...] = pixels
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    (expected,) = reference(model, {"input": (pixels - 127.0) / 128.0})
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-3, atol=1e-3)
    assert runner.get_property("bytes_converted") > 0


def test_rgbx_hw_view_equals_cpu_view(tiny_rgbx, make_runner) -> None:
    _, compiled = tiny_rgbx
    runner = make_runner(compiled)
    hw_in, hw_out = tensors(runner, HW)
    cpu_in, cpu_out = tensors(runner, CPU)
    assert hw_in.info.memory_layout is cl.MemoryLayout.NHWC4
    pixels = np.random.default_rng(4).integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)
    hw_in.numpy()[..., :3] = pixels
    cpu_in.numpy()[...] = pixels.transpose(0, 3, 1, 2)
    assert runner.execute([[hw_in]], [[hw_out]]) is cl.StatusCode.SUCCESS
    assert runner.execute([[cpu_in]], [[cpu_out]]) is cl.StatusCode.SUCCESS
    np.testing.assert_allclose(hw_out.numpy(), cpu_out.numpy(), rtol=1e-5, atol=1e-5)


def test_batch_of_sub_tensors_is_bound_without_copy(tiny_batch4, make_runner) -> None:
    model, compiled = tiny_batch4
    runner = make_runner(compiled)
    assert runner.get_batch_size() == 4
    full_in = runner.get_tensors_info(IN, HW)[0]
    full_out = runner.get_tensors_info(OUT, HW)[0]
    parent_in = runner.allocate_npu_tensor(full_in)
    parent_out = runner.allocate_npu_tensor(full_out)
    frame_in = full_in.with_shape((1, *full_in.shape[1:]))
    frame_out = full_out.with_shape((1, *full_out.shape[1:]))
    ins = [
        runner.allocate_sub_tensor(parent_in, frame_in, b * frame_in.size_in_bytes)
        for b in range(4)
    ]
    outs = [
        runner.allocate_sub_tensor(parent_out, frame_out, b * frame_out.size_in_bytes)
        for b in range(4)
    ]
    data = np.random.default_rng(5).standard_normal(full_in.shape).astype(np.float32)
    parent_in.numpy()[...] = data
    status = runner.execute([[t] for t in ins], [[t] for t in outs])
    assert status is cl.StatusCode.SUCCESS
    (expected,) = reference(model, {"input": data})
    np.testing.assert_allclose(parent_out.numpy(), expected, rtol=1e-4, atol=1e-4)
    assert runner.get_property("bytes_converted") == 0


def test_partial_batch_of_separate_frames(tiny_batch4, make_runner) -> None:
    model, compiled = tiny_batch4
    runner = make_runner(compiled)
    full_in = runner.get_tensors_info(IN, HW)[0]
    full_out = runner.get_tensors_info(OUT, HW)[0]
    frame_in = full_in.with_shape((1, *full_in.shape[1:]))
    frame_out = full_out.with_shape((1, *full_out.shape[1:]))
    rng = np.random.default_rng(6)
    ins, outs = [], []
    for _ in range(2):
        t = runner.allocate_npu_tensor(frame_in)
        t.numpy()[...] = rng.standard_normal(frame_in.shape)
        ins.append(t)
        outs.append(runner.allocate_npu_tensor(frame_out))
    assert runner.execute([[t] for t in ins], [[t] for t in outs]) is cl.StatusCode.SUCCESS
    for x, y in zip(ins, outs, strict=True):
        batch = np.zeros(full_in.shape, np.float32)
        batch[:1] = x.numpy()
        (expected,) = reference(model, {"input": batch})
        np.testing.assert_allclose(y.numpy(), expected[:1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("no_inputs", cl.StatusCode.INVALID_INPUT),
        ("wrong_count", cl.StatusCode.INVALID_INPUT),
        ("not_a_tensor", cl.StatusCode.INVALID_INPUT),
        ("wrong_shape", cl.StatusCode.INVALID_INPUT),
        ("wrong_dtype", cl.StatusCode.INVALID_INPUT),
        ("output_shape", cl.StatusCode.INVALID_OUTPUT),
        ("too_many_frames", cl.StatusCode.INVALID_INPUT),
        ("output_as_input_view", cl.StatusCode.INVALID_OUTPUT),
    ],
)
def test_bad_tensors_give_their_status(tiny, make_runner, case: str, status) -> None:
    _, compiled = tiny
    runner = make_runner(compiled)
    x, y = tensors(runner, HW)
    bad_shape = runner.allocate_npu_tensor(x.info.with_shape((1, 3, 8, 8)))
    wrong_dtype = cl.NpuTensor(
        cl.NpuTensorInfo("input", cl.DataType.FP16, IN, HW, cl.MemoryLayout.NCHW, x.info.shape),
        np.zeros(x.info.shape, np.float16),
        cl.MemoryType.USER_POINTER_CMA,
    )
    calls = {
        "no_inputs": ([], [[y]]),
        "wrong_count": ([[x, x]], [[y]]),
        "not_a_tensor": ([[np.zeros(x.info.shape, np.float32)]], [[y]]),
        "wrong_shape": ([[bad_shape]], [[y]]),
        "wrong_dtype": ([[wrong_dtype]], [[y]]),
        "output_shape": ([[x]], [[x]]),
        "too_many_frames": ([[x], [x]], [[y], [y]]),
        "output_as_input_view": ([[x]], [[bad_shape]]),
    }
    inputs, outputs = calls[case]
    assert runner.execute(inputs, outputs) is status
    assert runner.execute_async(inputs, outputs).status is status


def test_closed_runner(tiny, make_runner) -> None:
    _, compiled = tiny
    runner = make_runner(compiled)
    x, y = tensors(runner, HW)
    runner.close()
    runner.close()  # idempotent
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.FAILURE
    assert runner.execute_async([[x]], [[y]]).status is cl.StatusCode.FAILURE
    with pytest.raises(cl.CopylessError):
        runner.get_tensors_info(IN, HW)
    with pytest.raises(cl.CopylessError):
        runner.allocate_npu_tensor(x.info)
