"""The CUDA/TensorRT backend: refusals on machines without a GPU, options, and (``cuda``-marked,
on an NVIDIA GPU) results, in-place device binding, stream ordering, async and CUDA graphs.

The refusal tests observe what is really missing on the machine they run on (CI: the CPU
onnxruntime build; a machine with onnxruntime-gpu but no driver: the driver), and check that
the error is one line, an ``OptionError`` and an ``UnsupportedError``, with no chained
traceback.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import copyless as cl
from copyless.backends import _cuda_options as co
from copyless.backends._cuda_options import (
    CUDA_PROVIDER,
    TENSORRT_PROVIDER,
    CudaOptions,
    check_available,
    parse_cuda_options,
    provider_list,
)
from copyless.memory._device import DeviceMemory
from copyless.model import CompiledModel, compile_model, compile_to_memory
from copyless.runner import RunnerFactory
from copyless.types import DeviceUnavailableError
from cuda_helpers import CUDA_MISSING, optional, requires_cuda
from model_helpers import conv_net

IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
HW, CMA = cl.TensorType.HW, cl.MemoryType.USER_POINTER_CMA


@pytest.fixture(scope="module")
def compiled() -> CompiledModel:
    return compile_to_memory(conv_net(batch=2))


def _one_line_refusal(exc: BaseException) -> str:
    message = str(exc)
    assert isinstance(exc, DeviceUnavailableError)
    assert isinstance(exc, cl.OptionError) and isinstance(exc, cl.UnsupportedError)
    assert "\n" not in message
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)
    return message


# -- everywhere: refusal, never a fallback ----------------------------------------------
@pytest.mark.skipif(CUDA_MISSING is None, reason="a GPU is usable here: nothing is refused")
@pytest.mark.parametrize("device", ["cuda", "tensorrt"])
def test_gpu_device_is_refused_in_one_line_naming_what_is_missing(compiled, device) -> None:
    with pytest.raises(DeviceUnavailableError) as info:
        RunnerFactory.from_compiled(compiled, {"device": device})
    message = _one_line_refusal(info.value)
    assert message.startswith(f"device {device!r}: ")
    provider = co.PROVIDERS[device]
    if provider not in ort.get_available_providers():  # CI: the CPU build of onnxruntime
        assert provider in message and "copyless[cuda]" in message
    else:  # onnxruntime-gpu here, but no driver, GPU or CUDA library
        assert any(word in message for word in ("driver", "GPU", "libcu", "CuPy", "missing"))


@pytest.mark.skipif(CUDA_MISSING is None, reason="a GPU is usable here: nothing is refused")
def test_create_runner_from_file_refuses_cuda_and_cpu_still_works(tmp_path: Path) -> None:
    path = compile_model(conv_net(batch=2), tmp_path / "net.rai")
    with RunnerFactory.create_runner(path) as runner:  # VAIML: either engine, on the CPU
        on_openvino = runner.engine is cl.RunnerType.OPENVINO
        assert runner.get_property("device") == ("CPU" if on_openvino else "cpu")
        assert runner.get_property("memory") == ("cpu",)
    with pytest.raises(cl.OptionError) as info:
        RunnerFactory.create_runner(path, {"device": "cuda"})
    _one_line_refusal(info.value)


def test_both_onnxruntime_builds_installed_is_diagnosed(monkeypatch) -> None:
    """pip installs onnxruntime (the core's dependency) and onnxruntime-gpu (the cuda extra)
    into one ``onnxruntime`` folder; the error names the clash and the fix."""
    versions = {"onnxruntime": "1.32.0", "onnxruntime-gpu": "1.31.1"}
    monkeypatch.setattr(co.importlib.metadata, "version", versions.__getitem__)
    message = co._missing_provider(CUDA_PROVIDER)
    assert "both installed" in message
    assert "pip uninstall -y onnxruntime && pip install --force-reinstall --no-deps" in message


def test_driver_and_library_checks_name_the_missing_piece() -> None:
    """On a machine without a GPU, the first missing piece is named (real, not faked)."""
    if CUDA_MISSING is None:
        pytest.skip("a GPU is usable here")
    with pytest.raises(DeviceUnavailableError) as info:
        check_available("cuda")
    assert _one_line_refusal(info.value) == CUDA_MISSING
    with pytest.raises(cl.OptionError, match="not a GPU device"):
        check_available("cpu")


@pytest.mark.skipif(
    CUDA_PROVIDER not in ort.get_available_providers(), reason="needs onnxruntime-gpu installed"
)
def test_provider_library_check_names_the_first_missing_cuda_library() -> None:
    """With onnxruntime-gpu installed, the provider's library is loaded as onnxruntime would;
    on a machine without the CUDA 13 libraries the loader's first complaint is named."""
    co._library_problem.cache_clear()
    problem = co._library_problem("cuda")
    if problem is None:
        pytest.skip("the CUDA libraries load here")
    assert "\n" not in problem and ".so" in problem and "is missing" in problem


# -- everywhere: options ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"device_id": -1}, "device_id"),
        ({"device_id": True}, "device_id"),
        ({"stream": 0}, "default stream"),
        ({"stream": 2}, "default stream"),
        ({"stream": "7"}, "stream"),
        ({"cuda_graph": "yes"}, "cuda_graph"),
        ({"cudnn_conv_algo_search": "FASTEST"}, "cudnn_conv_algo_search"),
        ({"use_tf32": 1}, "use_tf32"),
        ({"gpu_mem_limit": 0}, "gpu_mem_limit"),
        ({"trt_engine_cache_path": 3}, "trt_engine_cache_path"),
        ({"no_such_option": 1}, "unknown CUDA option"),
    ],
)
def test_bad_cuda_options_raise_option_error(compiled, options, fragment: str) -> None:
    with pytest.raises(cl.OptionError, match=fragment):
        parse_cuda_options(options)
    # Runner options validate them before any backend is looked for, on every device.
    for device in ("cpu", "cuda"):
        with pytest.raises(cl.OptionError, match=fragment):
            RunnerFactory.from_compiled(compiled, {"device": device, "cuda_options": options})


def test_cuda_options_parse_and_are_accepted_on_cpu(compiled) -> None:
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
    # Documented as meaningless on the CPU: accepted, validated, kept.
    with RunnerFactory.from_compiled(compiled, {"cuda_options": {"cuda_graph": True}}) as runner:
        assert runner.get_property("cuda_options") == CudaOptions(cuda_graph=True)


def test_provider_list_runs_both_providers_on_one_stream(tmp_path: Path) -> None:
    options = parse_cuda_options(
        {
            "device_id": 1,
            "trt_fp16": True,
            "trt_engine_cache_path": tmp_path,
            "gpu_mem_limit": 1 << 30,
            "cuda_graph": True,
        }
    )
    cuda_only = provider_list("cuda", options, 0xABC)
    assert [p[0] for p in cuda_only] == [CUDA_PROVIDER]
    assert cuda_only[0][1]["user_compute_stream"] == str(0xABC)
    assert cuda_only[0][1]["device_id"] == "1"
    assert cuda_only[0][1]["gpu_mem_limit"] == str(1 << 30)
    assert cuda_only[0][1]["enable_cuda_graph"] == "1"
    trt = provider_list("tensorrt", options, 0xABC)
    assert [p[0] for p in trt] == [TENSORRT_PROVIDER, CUDA_PROVIDER]  # no CPU provider listed
    assert {p[1]["user_compute_stream"] for p in trt} == {str(0xABC)}
    assert trt[0][1]["trt_fp16_enable"] == "1"
    assert trt[0][1]["trt_engine_cache_path"] == str(tmp_path)
    assert trt[0][1]["trt_cuda_graph_enable"] == "1"


def test_backend_declares_device_memory_and_graphs_as_data(monkeypatch) -> None:
    """The declaration the runner reads (the availability check is the only thing faked:
    no session is created by the constructor)."""
    from copyless.backends import _cuda as cuda_backend

    monkeypatch.setattr(cuda_backend, "check_available", lambda device, device_id: None)
    plain = cuda_backend.CudaBackend(cl.RunnerOptions(device="cuda"))
    assert plain.capabilities.memory == ("cpu", "cuda:0")
    assert plain.capabilities.stream and plain.capabilities.engine_outputs
    assert not plain.capabilities.raw_call and not plain.capabilities.threads_per_engine
    graphs = cuda_backend.CudaBackend(
        cl.RunnerOptions(device="tensorrt", cuda_options=CudaOptions(device_id=3, cuda_graph=True))
    )
    assert graphs.capabilities.memory == ("cuda:3",)  # no host memory: fixed device addresses
    assert graphs.capabilities.cuda_graphs and not graphs.capabilities.engine_outputs
    with pytest.raises(cl.OptionError, match="'cpu'"):
        cuda_backend.CudaBackend(cl.RunnerOptions(device="cpu"))


# -- on a GPU ---------------------------------------------------------------------------
def _reference(x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(
        conv_net(batch=2).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    result: np.ndarray = session.run(None, {"input": x})[0]
    return result


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 3, 16, 16)).astype(np.float32)


def _bound(runner: cl.Runner) -> dict[str, int]:
    """Addresses the runner's (first) execution slot bound, by tensor name."""
    slot = runner._engines.slots_made[0]
    return {name: key[0] for name, key in slot.contexts[0]._bound.items()}


def _allocated(runner: cl.Runner) -> tuple[cl.NpuTensor, cl.NpuTensor]:
    (in_info,), (out_info,) = runner.get_tensors_info(IN), runner.get_tensors_info(OUT)
    return runner.allocate_npu_tensor(in_info), runner.allocate_npu_tensor(out_info)


def _close(actual: object, x: np.ndarray) -> None:
    np.testing.assert_allclose(actual, _reference(x), rtol=1e-3, atol=1e-3)


def _pair(runner: cl.Runner, x: object, y: object) -> tuple[cl.NpuTensor, cl.NpuTensor]:
    return (
        cl.NpuTensor(runner.get_tensors_info(IN, HW)[0], x, CMA),
        cl.NpuTensor(runner.get_tensors_info(OUT, HW)[0], y, CMA),
    )


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("view", [cl.TensorType.HW, cl.TensorType.CPU])
def test_host_memory_runs_on_the_gpu_and_matches_the_cpu(compiled, view) -> None:
    with RunnerFactory.from_compiled(compiled, {"device": "cuda"}) as runner:
        assert runner.get_property("memory") == ("cpu", "cuda:0")
        for seed in range(3):  # bound once, copied by onnxruntime every run
            x, y = _x(seed), np.zeros((2, 10), np.float32)
            t_in = cl.NpuTensor(runner.get_tensors_info(IN, view)[0], x, CMA)
            t_out = cl.NpuTensor(runner.get_tensors_info(OUT, view)[0], y, CMA)
            assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS
            np.testing.assert_allclose(y, _reference(x), rtol=1e-3, atol=1e-3)


@pytest.mark.cuda
@requires_cuda
def test_cupy_memory_is_bound_in_place_and_the_result_lands_in_the_users_array(compiled):
    cupy = optional("cupy")
    x = _x(1)
    d_x, d_y = cupy.asarray(x), cupy.zeros((2, 10), cupy.float32)
    with RunnerFactory.from_compiled(compiled, {"device": "cuda"}) as runner:
        t_in, t_out = _pair(runner, d_x, d_y)
        assert (t_in.device, t_in.address) == ("cuda:0", int(d_x.data.ptr))
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS
        assert _bound(runner) == {"input": int(d_x.data.ptr), "logits": int(d_y.data.ptr)}
        np.testing.assert_allclose(cupy.asnumpy(d_y), _reference(x), rtol=1e-3, atol=1e-3)
        d_x[...] = cupy.asarray(_x(2))  # same memory, new data: the replayed binding reads it
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS
        np.testing.assert_allclose(cupy.asnumpy(d_y), _reference(_x(2)), rtol=1e-3, atol=1e-3)


@pytest.mark.cuda
@requires_cuda
def test_torch_tensors_are_bound_in_place(compiled) -> None:
    torch = optional("torch")
    x = _x(3)
    d_x = torch.from_numpy(x).cuda()
    d_y = torch.zeros((2, 10), dtype=torch.float32, device="cuda")
    with RunnerFactory.from_compiled(compiled, {"device": "cuda"}) as runner:
        t_in, t_out = _pair(runner, d_x, d_y)
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS
        assert _bound(runner) == {"input": d_x.data_ptr(), "logits": d_y.data_ptr()}
        np.testing.assert_allclose(d_y.cpu().numpy(), _reference(x), rtol=1e-3, atol=1e-3)


@pytest.mark.cuda
@requires_cuda
def test_allocated_tensors_are_device_memory_cupy_and_torch_import_without_a_copy(compiled):
    cupy = optional("cupy")
    with RunnerFactory.from_compiled(compiled, {"device": "cuda"}) as runner:
        t_in, t_out = _allocated(runner)
        assert t_in.device == "cuda:0" and t_in.memory_type is cl.MemoryType.XRT_BO
        view = cupy.from_dlpack(t_in)
        assert int(view.data.ptr) == t_in.address
        view[...] = cupy.asarray(_x(4))
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS
        out = cupy.asarray(t_out)  # __cuda_array_interface__
        assert int(out.data.ptr) == t_out.address
        np.testing.assert_allclose(cupy.asnumpy(out), _reference(_x(4)), rtol=1e-3, atol=1e-3)
        with pytest.raises(cl.TensorError, match="device memory"):
            t_out.numpy()


@pytest.mark.cuda
@requires_cuda
def test_memory_on_another_device_or_host_memory_for_graphs_is_refused(compiled, caplog):
    cupy = optional("cupy")
    d_y = cupy.zeros((2, 10), cupy.float32)
    other = DeviceMemory(int(d_y.data.ptr), d_y.nbytes, device_id=1)  # never dereferenced
    with RunnerFactory.from_compiled(compiled, {"device": "cuda"}) as runner:
        t_in = cl.NpuTensor(runner.get_tensors_info(IN, HW)[0], other, CMA)
        t_out = cl.NpuTensor(runner.get_tensors_info(OUT, HW)[0], d_y, CMA)
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.INVALID_INPUT
    assert "'input': memory on cuda:1" in caplog.text and "cuda:0" in caplog.text
    graphs = {"device": "cuda", "cuda_options": {"cuda_graph": True}}
    with RunnerFactory.from_compiled(compiled, graphs) as runner:
        t_in, t_out = _pair(runner, _x(0), d_y)
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.INVALID_INPUT
    assert "memory on cpu, but this runner binds memory on cuda:0 only" in caplog.text


SPIN_COPY = r"""
extern "C" __global__ void spin_copy(float* dst, const float* src, int n, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
"""


def _slow_write(cupy, stream, dst, src) -> None:
    """Queue on ``stream`` a kernel that spins ~0.2 s and then writes ``src`` into ``dst``:
    an engine not ordered after ``stream`` reads the old contents."""
    kernel = cupy.RawKernel(SPIN_COPY, "spin_copy")
    n = dst.size
    cupy.cuda.runtime.deviceSynchronize()  # src and dst are settled: only the kernel races
    with stream:
        kernel(((n + 255) // 256,), (256,), (dst, src, np.int32(n), np.int64(400_000_000)))


@pytest.mark.cuda
@requires_cuda
def test_the_users_stream_orders_pre_execute_and_post_without_host_syncs(compiled) -> None:
    cupy = optional("cupy")
    stream = cupy.cuda.Stream(non_blocking=True)  # not ordered by the legacy default stream
    x = _x(5)
    d_x, d_y = cupy.zeros((2, 3, 16, 16), cupy.float32), cupy.zeros((2, 10), cupy.float32)
    options = {"device": "cuda", "cuda_options": {"stream": stream.ptr}}
    with RunnerFactory.from_compiled(compiled, options) as runner:
        t_in, t_out = _pair(runner, d_x, d_y)
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS  # warm-up
        _slow_write(cupy, stream, d_x, cupy.asarray(x))  # preprocessing, still running
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS
        with stream:
            doubled = d_y * 2  # postprocessing on the same stream
        stream.synchronize()
        np.testing.assert_allclose(cupy.asnumpy(doubled), 2 * _reference(x), rtol=1e-3, atol=1e-3)


class _CaiOnStream:
    """A device array's ``__cuda_array_interface__`` naming the stream that writes it."""

    def __init__(self, array, stream: int) -> None:
        self.array, self.stream = array, stream

    @property
    def __cuda_array_interface__(self) -> dict:
        return {**self.array.__cuda_array_interface__, "version": 3, "stream": self.stream}


@pytest.mark.cuda
@requires_cuda
def test_a_producer_stream_from_the_interface_is_waited_for(compiled) -> None:
    cupy = optional("cupy")
    stream = cupy.cuda.Stream(non_blocking=True)
    x = _x(6)
    d_x, d_y = cupy.zeros((2, 3, 16, 16), cupy.float32), cupy.zeros((2, 10), cupy.float32)
    with RunnerFactory.from_compiled(compiled, {"device": "cuda"}) as runner:
        t_in, t_out = _pair(runner, _CaiOnStream(d_x, stream.ptr), d_y)
        assert t_in.device_memory.stream == stream.ptr
        _slow_write(cupy, stream, d_x, cupy.asarray(x))
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS
        np.testing.assert_allclose(cupy.asnumpy(d_y), _reference(x), rtol=1e-3, atol=1e-3)


@pytest.mark.cuda
@requires_cuda
def test_async_jobs_run_on_streams_of_their_own_with_correct_results(compiled) -> None:
    options = {"device": "cuda", "max_concurrent_runs": 3}
    with RunnerFactory.from_compiled(compiled, options) as runner:
        inputs = [_x(10 + i) for i in range(9)]
        outputs = [np.zeros((2, 10), np.float32) for _ in inputs]
        pending = []
        for x, y in zip(inputs, outputs, strict=True):
            t_in, t_out = _pair(runner, x, y)
            handle = runner.execute_async([[t_in]], [[t_out]])
            while handle.status is cl.StatusCode.RESOURCE_UNAVAILABLE:
                runner.wait(pending.pop(0)[0], -1)
                handle = runner.execute_async([[t_in]], [[t_out]])
            pending.append((handle, t_in, t_out))
        for handle, *_ in pending:
            assert runner.wait(handle, -1) is cl.StatusCode.SUCCESS
        for x, y in zip(inputs, outputs, strict=True):
            np.testing.assert_allclose(y, _reference(x), rtol=1e-3, atol=1e-3)
        streams = {s.contexts[0].stream for s in runner._engines.slots_made}
        assert len(streams) == len(runner._engines.slots_made)  # (overlap: benchmarks/gpu.py)


@pytest.mark.cuda
@requires_cuda
def test_cuda_graphs_replay_with_new_data_and_recapture_after_a_rebind(compiled) -> None:
    cupy = optional("cupy")
    options = {"device": "cuda", "cuda_options": {"cuda_graph": True}}
    with RunnerFactory.from_compiled(compiled, options) as runner:
        t_in, t_out = _allocated(runner)
        d_x, d_y = cupy.from_dlpack(t_in), cupy.from_dlpack(t_out)
        for seed in range(5):  # warm-up, capture, then replays at the same addresses
            d_x[...] = cupy.asarray(_x(seed))
            assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS
            _close(cupy.asnumpy(d_y), _x(seed))
        other = runner.allocate_npu_tensor(runner.get_tensors_info(OUT)[0])
        for _ in range(3):
            assert runner.execute([[t_in]], [[other]]) is cl.StatusCode.SUCCESS
        _close(cupy.asnumpy(cupy.from_dlpack(other)), _x(4))


@pytest.mark.cuda
@requires_cuda
def test_cuda_graphs_refuse_data_dependent_outputs_before_loading() -> None:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("NonZero", ["x"], ["y"])],
        "nonzero",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [2, None])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 10
    compiled = compile_to_memory(model)
    options = {"device": "cuda", "cuda_options": {"cuda_graph": True}}
    with pytest.raises(cl.UnsupportedError, match="data-dependent shapes"):
        RunnerFactory.from_compiled(compiled, options)
