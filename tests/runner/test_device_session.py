"""``copyless.DeviceSession``: seed 003's calls over one Runner.

Everywhere: validation, and the whole facade on ``device="cpu"`` (the same calls over host
memory: buffers, copies, both run calls, refusals, close). ``cuda``-marked: the same on a
GPU, with CuPy/PyTorch memory and int device pointers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from runner_helpers import conv_net, reference

import copyless as cl
from copyless.memory._device import DeviceMemory
from copyless.model import compile_model, compile_to_memory
from cuda_helpers import CUDA_MISSING, optional, requires_cuda


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("device_session") / "net.onnx"
    path.write_bytes(conv_net(batch=2).SerializeToString())
    return path


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 3, 16, 16)).astype(np.float32)


def _expected(x: np.ndarray) -> np.ndarray:
    return reference(conv_net(batch=2), {"input": x})[0]


def test_construction_validates_before_taking_anything(onnx_path: Path, tmp_path: Path) -> None:
    with pytest.raises(cl.OptionError, match="device must be one of"):
        cl.DeviceSession(onnx_path, device="GPU")
    with pytest.raises(cl.ModelLoadError, match="no such file"):
        cl.DeviceSession(tmp_path / "missing.onnx", device="cpu")
    with pytest.raises(cl.ModelLoadError, match="path or a CompiledModel"):
        cl.DeviceSession(42, device="cpu")  # type: ignore[arg-type]
    with pytest.raises(cl.OptionError, match=r"need an \.onnx model"):
        cl.DeviceSession(compile_to_memory(conv_net()), device="cpu", batch_size=2)
    with pytest.raises(cl.OptionError, match="unknown option"):
        cl.DeviceSession(onnx_path, device="cpu", options={"no_such": 1})
    with pytest.raises(cl.OptionError, match="stream"):
        cl.DeviceSession(onnx_path, device="cpu", cuda_options={"stream": 0})


@pytest.mark.skipif(CUDA_MISSING is None, reason="a GPU is usable here")
def test_cuda_without_a_gpu_is_one_line(onnx_path: Path) -> None:
    with pytest.raises(cl.OptionError) as info:
        cl.DeviceSession(onnx_path)
    assert "\n" not in str(info.value) and str(info.value) == CUDA_MISSING


def test_the_seed_calls_on_the_cpu(onnx_path: Path, tmp_path: Path) -> None:
    rai = compile_model(conv_net(batch=2), tmp_path / "net.rai")
    for model in (onnx_path, rai, compile_to_memory(conv_net(batch=2))):
        with cl.DeviceSession(model, device="cpu") as session:
            assert session.device == "cpu" and session.stream is None
            x, y = _x(0), np.zeros((2, 10), np.float32)
            assert session.run_inference(x, y) is cl.StatusCode.SUCCESS
            np.testing.assert_allclose(y, _expected(x), rtol=1e-4, atol=1e-4)
            buffers = session.get_device_buffers()
            assert buffers.d_input == buffers.inputs[0].address
            assert buffers.d_output == buffers.outputs[0].address
            session.copy_input_to_gpu(_x(1))
            for _ in range(3):  # the same buffers: bound once, replayed by the fast path
                assert session.run_inference_device() is cl.StatusCode.SUCCESS
            out = np.zeros((2, 10), np.float32)
            session.copy_output_to_cpu(out)
            np.testing.assert_allclose(out, _expected(_x(1)), rtol=1e-4, atol=1e-4)
            np.testing.assert_array_equal(buffers.outputs[0].numpy(), out)
            fast = session.runner.get_property("fast_calls")
            assert fast >= 1
            for _ in range(3):  # the same host arrays: wrapped once, replayed too
                assert session.run_inference(x, y) is cl.StatusCode.SUCCESS
            assert session.runner.get_property("fast_calls") >= fast + 2


def test_bad_arguments_are_statuses_or_tensor_errors(onnx_path: Path, caplog) -> None:
    with cl.DeviceSession(onnx_path, device="cpu") as session:
        x, y = _x(0), np.zeros((2, 10), np.float32)
        assert session.run_inference(x.astype(np.float64), y) is cl.StatusCode.INVALID_INPUT
        assert session.run_inference(x, y[:1]) is cl.StatusCode.INVALID_OUTPUT
        assert session.run_inference([x, x], y) is cl.StatusCode.INVALID_INPUT
        strided = np.zeros((10, 2), np.float32).T  # right size, not C-contiguous
        assert session.run_inference(x, strided) is cl.StatusCode.INVALID_OUTPUT
        # Host memory where device memory is required, and device memory on a CPU session.
        assert session.run_inference_device(x) is cl.StatusCode.INVALID_INPUT
        assert "not device memory" in caplog.text
        on_gpu = DeviceMemory(0x7F00_0000_0000, y.nbytes, 0)
        assert session.run_inference_device(None, on_gpu) is cl.StatusCode.INVALID_OUTPUT
        assert "memory on cuda:0, but this runner binds memory on cpu only" in caplog.text
        with pytest.raises(cl.TensorError, match="does not match"):
            session.copy_input_to_gpu(x[:1])
        with pytest.raises(cl.TensorError, match="read-only"):
            readonly = np.zeros((2, 10), np.float32)
            readonly.flags.writeable = False
            session.copy_output_to_cpu(readonly)
        with pytest.raises(cl.TensorError, match="expected a numpy array"):
            session.copy_input_to_gpu(bytearray(x.nbytes))


def test_seed_003_as_written_on_the_cpu(onnx_path: Path) -> None:
    """The seed's calls with its arguments: sizes in elements and the session's own
    d_input/d_output pointers (host addresses on device="cpu")."""
    with cl.DeviceSession(onnx_path, device="cpu") as session:
        input_size, output_size = 2 * 3 * 16 * 16, 2 * 10
        input_cpu = _x(2).reshape(-1)  # the seed's flat vec![0.0; input_size]
        output_cpu = np.zeros(output_size, np.float32)
        status = session.run_inference(input_cpu, output_cpu, input_size, output_size)
        assert status is cl.StatusCode.SUCCESS
        np.testing.assert_allclose(output_cpu.reshape(2, 10), _expected(_x(2)), 1e-4, 1e-4)
        buffers = session.get_device_buffers()
        d_input, d_output = buffers.d_input, buffers.d_output
        session.copy_input_to_gpu(_x(3).reshape(-1), input_size)
        status = session.run_inference_device(d_input, d_output, input_size, output_size)
        assert status is cl.StatusCode.SUCCESS
        out = np.zeros(output_size, np.float32)
        session.copy_output_to_cpu(out, output_size)
        np.testing.assert_allclose(out.reshape(2, 10), _expected(_x(3)), 1e-4, 1e-4)
        # keyword forms, and one size per tensor as a list
        status = session.run_inference_device(
            d_input=d_input, d_output=d_output, input_size=[input_size], output_size=output_size
        )
        assert status is cl.StatusCode.SUCCESS


def test_wrong_sizes_and_foreign_pointers_never_run(onnx_path: Path, caplog) -> None:
    with cl.DeviceSession(onnx_path, device="cpu") as session:
        buffers = session.get_device_buffers()
        x, y = _x(4), np.zeros((2, 10), np.float32)
        before = session.runner.get_property("jobs_run")
        n_in, n_out = x.size, y.size
        assert session.run_inference(x, y, n_in - 1, n_out) is cl.StatusCode.INVALID_INPUT
        assert session.run_inference(x, y, n_in, n_out + 1) is cl.StatusCode.INVALID_OUTPUT
        assert session.run_inference(x, y, [n_in, 1], n_out) is cl.StatusCode.INVALID_INPUT
        assert session.run_inference(x, y, "many", n_out) is cl.StatusCode.INVALID_INPUT
        assert "input_size=1535 does not match tensor 'input'" in caplog.text
        d_in, d_out = buffers.d_input, buffers.d_output
        status = session.run_inference_device(d_in, d_out, n_in // 2, n_out)
        assert status is cl.StatusCode.INVALID_INPUT
        status = session.run_inference_device(d_in, d_out, n_in, 7)
        assert status is cl.StatusCode.INVALID_OUTPUT
        # pointers that are not the session's: the other buffer's, a numpy array's, garbage
        assert session.run_inference_device(d_out, d_out) is cl.StatusCode.INVALID_INPUT
        assert "is not the session's buffer" in caplog.text
        assert session.run_inference_device(x.ctypes.data) is cl.StatusCode.INVALID_INPUT
        assert session.run_inference_device(None, 0xDEAD) is cl.StatusCode.INVALID_OUTPUT
        assert session.runner.get_property("jobs_run") == before  # nothing ran
        with pytest.raises(cl.TensorError, match="input_size=10 does not match"):
            session.copy_input_to_gpu(x, 10)
        with pytest.raises(cl.TensorError, match="output_size=2 does not match"):
            session.copy_output_to_cpu(y, 2)
        np.testing.assert_array_equal(buffers.inputs[0].numpy(), 0)  # nothing copied


def test_close_releases_the_runner_and_keeps_held_buffers(onnx_path: Path) -> None:
    session = cl.DeviceSession(onnx_path, device="cpu")
    buffers = session.get_device_buffers()
    runner = session.runner
    session.close()
    session.close()  # idempotent
    assert session.closed and runner.closed and "closed" in repr(session)
    assert buffers.inputs[0].numpy().shape == (2, 3, 16, 16)  # the buffers own their memory
    with pytest.raises(cl.RunnerClosedError):
        session.get_device_buffers()
    with pytest.raises(cl.RunnerClosedError):
        session.run_inference(_x(0), np.zeros((2, 10), np.float32))


# -- on a GPU ---------------------------------------------------------------------------
@pytest.mark.cuda
@requires_cuda
def test_the_seed_calls_on_the_gpu(onnx_path: Path) -> None:
    cupy = optional("cupy")
    with cl.DeviceSession(onnx_path) as session:
        x, y = _x(2), np.zeros((2, 10), np.float32)
        assert session.run_inference(x, y) is cl.StatusCode.SUCCESS  # the regular API
        np.testing.assert_allclose(y, _expected(x), rtol=1e-3, atol=1e-3)
        buffers = session.get_device_buffers()
        d_in = cupy.from_dlpack(buffers.inputs[0])  # the session's buffer, no copy
        assert int(d_in.data.ptr) == buffers.d_input
        d_in[...] = cupy.asarray(_x(3))  # "your CUDA preprocessing kernel"
        assert session.run_inference_device() is cl.StatusCode.SUCCESS
        d_out = cupy.from_dlpack(buffers.outputs[0])
        np.testing.assert_allclose(cupy.asnumpy(d_out), _expected(_x(3)), rtol=1e-3, atol=1e-3)
        session.copy_input_to_gpu(_x(4))  # pattern 3: copy once, run, copy back
        assert session.run_inference_device() is cl.StatusCode.SUCCESS
        session.copy_output_to_cpu(y)
        np.testing.assert_allclose(y, _expected(_x(4)), rtol=1e-3, atol=1e-3)


@pytest.mark.cuda
@requires_cuda
def test_user_device_memory_and_int_pointers(onnx_path: Path, caplog) -> None:
    cupy = optional("cupy")
    with cl.DeviceSession(onnx_path) as session:
        d_x, d_y = cupy.asarray(_x(5)), cupy.zeros((2, 10), cupy.float32)
        assert session.run_inference_device(d_x, d_y) is cl.StatusCode.SUCCESS
        np.testing.assert_allclose(cupy.asnumpy(d_y), _expected(_x(5)), rtol=1e-3, atol=1e-3)
        d_y[...] = 0
        ptrs = int(d_x.data.ptr), int(d_y.data.ptr)
        assert session.run_inference_device(*ptrs) is cl.StatusCode.SUCCESS
        np.testing.assert_allclose(cupy.asnumpy(d_y), _expected(_x(5)), rtol=1e-3, atol=1e-3)
        host = np.zeros((2, 10), np.float32)
        assert session.run_inference_device(ptrs[0], int(host.ctypes.data)) is (
            cl.StatusCode.INVALID_OUTPUT
        )
        assert "is not device memory" in caplog.text
