"""The CUDA/TensorRT backend: no silent CPU fallback, options, and (on a GPU) real results.

Tests marked ``cuda`` need onnxruntime-gpu and an NVIDIA device; they are skipped, with the
reason, anywhere else. The others run everywhere and check what a machine without a GPU
must do: refuse ``device="cuda"`` with an error naming what is missing.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import copyless as cl
from copyless.backends import _cuda_driver
from copyless.backends._cuda_options import (
    CUDA_PROVIDER,
    TENSORRT_PROVIDER,
    CudaOptions,
    parse_cuda_options,
    provider_list,
)
from copyless.backends.cuda import CudaBackend, check_available
from copyless.model import CompiledModel, compile_model, compile_to_memory
from copyless.runner import RunnerFactory
from copyless.runner.options import RunnerOptions
from cuda_helpers import requires_cuda
from model_helpers import conv_net


def small_net() -> onnx.ModelProto:
    """The shared conv net with batch 2: input [2,3,16,16], logits [2,10]."""
    return conv_net(batch=2)


@pytest.fixture(scope="module")
def compiled() -> CompiledModel:
    return compile_to_memory(small_net())


# -- everywhere: refusal, never a fallback ----------------------------------------------
@pytest.mark.parametrize(
    ("device", "provider"), [("cuda", CUDA_PROVIDER), ("tensorrt", TENSORRT_PROVIDER)]
)
def test_gpu_device_without_provider_names_it(compiled, device: str, provider: str) -> None:
    if provider in ort.get_available_providers():
        pytest.skip(f"{provider} is installed here: the refusal path cannot be observed")
    with pytest.raises(cl.UnsupportedError) as info:
        RunnerFactory.from_compiled(compiled, {"device": device})
    message = str(info.value)
    assert provider in message
    assert "copyless[cuda]" in message
    with pytest.raises(cl.UnsupportedError, match=provider):
        check_available(device)


def test_create_runner_from_file_refuses_cuda_without_provider(tmp_path: Path) -> None:
    if CUDA_PROVIDER in ort.get_available_providers():
        pytest.skip(f"{CUDA_PROVIDER} is installed here: the refusal path cannot be observed")
    path = compile_model(small_net(), tmp_path / "net.rai")
    # The CPU runner works on the same file: the refusal is about the device only.
    with RunnerFactory.create_runner(path) as runner:
        assert runner.get_property("device") == "cpu"
    with pytest.raises(cl.UnsupportedError, match=CUDA_PROVIDER):
        RunnerFactory.create_runner(path, {"device": "cuda"})


def test_missing_driver_is_unsupported_not_a_crash() -> None:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        with pytest.raises(cl.UnsupportedError, match=r"libcuda\.so\.1"):
            _cuda_driver.driver()
    else:
        pytest.skip("an NVIDIA driver is installed here")


# -- everywhere: options ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"device_id": -1}, "device_id"),
        ({"device_id": True}, "device_id"),
        ({"stream": 0}, "default stream"),
        ({"stream": 2}, "default stream"),
        ({"stream": "7"}, "stream"),
        ({"cudnn_conv_algo_search": "FASTEST"}, "cudnn_conv_algo_search"),
        ({"use_tf32": 1}, "use_tf32"),
        ({"gpu_mem_limit": 0}, "gpu_mem_limit"),
        ({"trt_engine_cache_path": 3}, "trt_engine_cache_path"),
        ({"no_such_option": 1}, "unknown CUDA option"),
    ],
)
def test_bad_cuda_options_raise_option_error(options: dict[str, object], fragment: str) -> None:
    with pytest.raises(cl.OptionError, match=fragment):
        parse_cuda_options(options)
    # The backend validates before it looks for a provider or a device.
    with pytest.raises(cl.OptionError, match=fragment):
        CudaBackend(RunnerOptions(device="cuda"), options)


def test_cuda_options_parse_and_normalise() -> None:
    parsed = parse_cuda_options(
        {"device_id": 1, "stream": 12345, "cudnn_conv_algo_search": "exhaustive", "strict": True}
    )
    assert parsed == CudaOptions(
        device_id=1, stream=12345, cudnn_conv_algo_search="EXHAUSTIVE", strict=True
    )
    assert parse_cuda_options(None) == CudaOptions()
    assert parse_cuda_options(parsed) is parsed
    with pytest.raises(cl.OptionError):
        parse_cuda_options(["device_id"])  # type: ignore[arg-type]


def test_backend_refuses_cpu_device() -> None:
    with pytest.raises(cl.OptionError, match="'cpu'"):
        CudaBackend(RunnerOptions(device="cpu"))


def test_provider_list_runs_both_providers_on_one_stream(tmp_path: Path) -> None:
    options = parse_cuda_options(
        {
            "device_id": 1,
            "trt_fp16": True,
            "trt_engine_cache_path": tmp_path,
            "gpu_mem_limit": 1 << 30,
        }
    )
    cuda_only = provider_list("cuda", options, 0xABC)
    assert [p[0] for p in cuda_only] == [CUDA_PROVIDER]
    assert cuda_only[0][1]["user_compute_stream"] == str(0xABC)
    assert cuda_only[0][1]["device_id"] == "1"
    assert cuda_only[0][1]["gpu_mem_limit"] == str(1 << 30)
    trt = provider_list("tensorrt", options, 0xABC)
    assert [p[0] for p in trt] == [TENSORRT_PROVIDER, CUDA_PROVIDER]  # no CPU provider listed
    assert {p[1]["user_compute_stream"] for p in trt} == {str(0xABC)}
    assert trt[0][1]["trt_fp16_enable"] == "1"
    assert trt[0][1]["trt_engine_cache_path"] == str(tmp_path)


# -- on a GPU ---------------------------------------------------------------------------
def _cpu_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    result: np.ndarray = session.run(None, {"input": x})[0]
    return result


def _run(runner: cl.Runner, x: np.ndarray, tensor_type: cl.TensorType) -> np.ndarray:
    in_info = runner.get_tensors_info(cl.TensorDirection.INPUT, tensor_type)[0]
    out_info = runner.get_tensors_info(cl.TensorDirection.OUTPUT, tensor_type)[0]
    y = np.zeros(out_info.shape, np.float32)
    memory = cl.MemoryType.USER_POINTER_CMA
    inputs = [[cl.NpuTensor(in_info, x, memory)]]
    outputs = [[cl.NpuTensor(out_info, y, memory)]]
    assert runner.execute(inputs, outputs) is cl.StatusCode.SUCCESS
    return y


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("tensor_type", [cl.TensorType.HW, cl.TensorType.CPU])
def test_cuda_runner_matches_cpu_backend(compiled, tensor_type: cl.TensorType) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    expected = _cpu_reference(small_net(), x)
    with RunnerFactory.from_compiled(compiled, {"device": "cuda"}) as runner:
        assert runner.get_property("device") == "cuda"
        for _ in range(3):  # bound once, staged every run
            np.testing.assert_allclose(_run(runner, x, tensor_type), expected, rtol=1e-3, atol=1e-3)
        x2 = x[::-1].copy()
        np.testing.assert_allclose(
            _run(runner, x2, tensor_type), _cpu_reference(small_net(), x2), rtol=1e-3, atol=1e-3
        )


@pytest.mark.cuda
@requires_cuda
def test_cuda_context_binds_device_memory_in_place_and_stages_host_memory(compiled) -> None:
    cupy = pytest.importorskip("cupy")
    backend = CudaBackend(RunnerOptions(device="cuda"))
    engine = backend.load(compiled.partitions[0], 1)
    context = engine.new_context()
    x = np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype(np.float32)
    d_x = cupy.asarray(x)
    y = np.zeros((2, 10), np.float32)
    context.bind_input("input", int(d_x.data.ptr), cl.DataType.FLOAT32, (2, 3, 16, 16))
    context.bind_output("logits", int(y.ctypes.data), cl.DataType.FLOAT32, (2, 10))
    assert context.staged == ("logits",)  # device input in place, host output staged
    context.run()
    np.testing.assert_allclose(y, _cpu_reference(small_net(), x), rtol=1e-3, atol=1e-3)
    with pytest.raises(cl.UnsupportedError, match="host memory"):
        context.bind_device("input", int(x.ctypes.data), cl.DataType.FLOAT32, x.shape, output=False)
    context.close()
    engine.close()


@pytest.mark.cuda
@requires_cuda
def test_session_really_runs_on_the_gpu_provider(compiled) -> None:
    backend = CudaBackend(RunnerOptions(device="cuda"), {"strict": False})
    engine = backend.load(compiled.partitions[0], 1)
    assert engine.session.get_providers()[0] == CUDA_PROVIDER
    assert backend.stream > 2
    engine.close()
