"""The device-pointer API and the device-memory producers behind it.

Everywhere: argument validation, the stream rule with fake producers (real DLPack capsules
and ``__cuda_array_interface__`` dicts, over host memory that is never dereferenced as device
memory), the DLPack C ABI checked against numpy as a real third-party consumer/producer.
``cuda``-marked: the real session on a GPU with CuPy and PyTorch.
"""

from __future__ import annotations

import ctypes
import gc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from runner_helpers import conv_net

import copyless as cl
from copyless.memory import device as dev
from copyless.memory.device import DeviceArray, as_device_array, export_dlpack, import_dlpack
from copyless.model import compile_to_memory
from copyless.runner.device_api import DeviceSession, device_argument, host_array
from cuda_helpers import requires_cuda

SESSION_STREAM = 0x5000  # a made-up consumer stream handle: fakes only record it


def info(shape: tuple[int, ...] = (1, 3, 4, 4), dtype: cl.DataType = cl.DataType.FLOAT32) -> Any:
    return cl.NpuTensorInfo(
        "x", dtype, cl.TensorDirection.INPUT, cl.TensorType.HW, cl.MemoryLayout.NCHW, shape
    )


class FakeCudaDLPack:
    """A CUDA DLPack producer over host bytes: records the stream it is asked to order on."""

    def __init__(self, array: np.ndarray, device: tuple[int, int] = (dev.DLPACK_CUDA, 0)) -> None:
        self.array = array
        self.device = device
        self.streams: list[Any] = []

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        self.streams.append(stream)
        data_type = cl.DataType.from_numpy(self.array.dtype)
        shape = tuple(self.array.shape)
        return export_dlpack(self.array.ctypes.data, shape, data_type, self.device, self.array)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


class FakeCai:
    """A ``__cuda_array_interface__`` v3 producer over host bytes."""

    def __init__(self, array: np.ndarray, **overrides: Any) -> None:
        self.array = array
        self.interface: dict[str, Any] = {
            "shape": array.shape,
            "typestr": array.dtype.str,
            "data": (array.ctypes.data, False),
            "strides": None,
            "version": 3,
            "stream": None,
        }
        self.interface.update(overrides)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self.interface


class CaiView:
    """Only the ``__cuda_array_interface__`` of a real device array, with a given stream."""

    def __init__(self, array: Any, stream: int) -> None:
        self.array = array
        self.interface = dict(array.__cuda_array_interface__, stream=stream)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self.interface


# -- DeviceSession construction: validation before any resource -------------------------
@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("device_api") / "net.onnx"
    onnx.save(conv_net(), path)
    return path


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"device": "cpu"}, cl.OptionError, "device"),
        ({"device_id": -1}, cl.OptionError, "device_id"),
        ({"stream": 0}, cl.OptionError, "default stream"),
        ({"stream": 1}, cl.OptionError, "default stream"),
        ({"cuda_options": {"bogus": 1}}, cl.OptionError, "unknown CUDA option"),
        ({"num_threads": 0}, cl.OptionError, "num_threads"),
    ],
)
def test_session_rejects_bad_arguments(
    onnx_path: Path, kwargs: Any, error: Any, fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        DeviceSession(onnx_path, **kwargs)


def test_session_rejects_bad_models(tmp_path: Path, onnx_path: Path) -> None:
    with pytest.raises(cl.ModelLoadError, match="no such file"):
        DeviceSession(tmp_path / "missing.onnx")
    with pytest.raises(cl.ModelLoadError, match="path or a CompiledModel"):
        DeviceSession(42)  # type: ignore[arg-type]
    with pytest.raises(cl.OptionError, match=r"need an \.onnx model"):
        DeviceSession(compile_to_memory(conv_net()), batch_size=2)
    with pytest.raises(cl.OptionError, match=r"need an \.onnx model"):
        DeviceSession(tmp_path, batch_size=2)


def test_session_without_cuda_provider_is_refused(onnx_path: Path) -> None:
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("the CUDA provider is installed here: the refusal cannot be observed")
    for device, provider in (("cuda", "CUDAExecutionProvider"), ("tensorrt", "Tensorrt")):
        with pytest.raises(cl.UnsupportedError, match=provider):
            DeviceSession(onnx_path, device=device)


# -- host arrays ------------------------------------------------------------------------
def test_host_array_checks() -> None:
    good = np.zeros((1, 3, 4, 4), np.float32)
    assert host_array(good, info(), writable=True) is good
    assert host_array(good.reshape(-1), info(), writable=False).shape == (48,)  # any shape
    with pytest.raises(cl.TensorError, match="does not match"):
        host_array(good.astype(np.float64), info(), writable=False)
    with pytest.raises(cl.TensorError, match="does not match"):
        host_array(good[:, :2], info(), writable=False)
    with pytest.raises(cl.TensorError, match="C-contiguous"):
        host_array(np.zeros((4, 4, 3, 1), np.float32).transpose(3, 2, 1, 0), info(), writable=False)
    readonly = np.zeros((1, 3, 4, 4), np.float32)
    readonly.flags.writeable = False
    assert host_array(readonly, info(), writable=False) is readonly
    with pytest.raises(cl.TensorError, match="read-only"):
        host_array(readonly, info(), writable=True)
    with pytest.raises(cl.TensorError, match="run_inference_device"):
        host_array(FakeCai(good), info(), writable=False)
    with pytest.raises(cl.TensorError, match="numpy array"):
        host_array([0.0] * 48, info(), writable=False)


# -- the stream rule, with fake producers -----------------------------------------------
def test_dlpack_producer_is_asked_to_order_on_the_session_stream() -> None:
    data = np.arange(48, dtype=np.float32).reshape(1, 3, 4, 4)
    producer = FakeCudaDLPack(data)
    array = device_argument(
        producer,
        info(),
        session_stream=SESSION_STREAM,
        producer_stream=None,
        device_id=0,
        writable=True,
    )
    assert producer.streams == [SESSION_STREAM]
    assert array.ptr == data.ctypes.data  # the producer's memory, no copy
    assert (array.shape, array.data_type, array.stream) == ((1, 3, 4, 4), cl.DataType.FLOAT32, None)


def test_legacy_default_stream_travels_as_one() -> None:
    producer = FakeCudaDLPack(np.zeros((1, 3, 4, 4), np.float32))
    DeviceArray.from_dlpack(producer, stream=0)
    DeviceArray.from_dlpack(producer, stream=None)
    assert producer.streams == [1, None]  # DLPack reserves 0
    assert dev.dlpack_stream_argument(7) == 7
    with pytest.raises(cl.TensorError):
        dev.dlpack_stream_argument(-3)


def test_dlpack_import_releases_the_producer_with_the_array() -> None:
    data = np.zeros((1, 3, 4, 4), np.float32)
    alive = weakref.ref(data)
    producer = FakeCudaDLPack(data)
    array = as_device_array(producer, stream=SESSION_STREAM)
    del data, producer
    gc.collect()
    assert alive() is not None  # the consumed capsule keeps the producer's memory
    del array
    gc.collect()
    assert alive() is None  # ...and its deleter ran when the array went


def test_cuda_array_interface_stream_is_kept_for_the_backend() -> None:
    data = np.zeros((1, 3, 4, 4), np.float32)
    producer = FakeCai(data, stream=0x77)
    array = device_argument(
        producer,
        info(),
        session_stream=SESSION_STREAM,
        producer_stream=None,
        device_id=0,
        writable=False,
    )
    assert array.stream == 0x77  # the backend waits on it with an event before running
    assert array.owner is producer and array.ptr == data.ctypes.data


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"stream": 0}, "stream 0"),
        ({"strides": (4, 48, 16, 4)}, "non-packed"),
        ({"mask": object()}, "masked"),
        ({"typestr": "<c8"}, "DataType"),
        ({"shape": (0, 3)}, "empty"),
        ({"data": (0, False)}, "non-zero"),
    ],
)
def test_bad_cuda_array_interfaces(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(cl.TensorError, match=fragment):
        as_device_array(FakeCai(np.zeros((1, 3, 4, 4), np.float32), **overrides), stream=None)


def test_packed_strides_are_accepted() -> None:
    data = np.zeros((1, 3, 4, 4), np.float32)
    array = as_device_array(FakeCai(data, strides=data.strides), stream=None)
    assert array.nbytes == data.nbytes


def test_dlpack_is_preferred_over_cuda_array_interface() -> None:
    class Both(FakeCudaDLPack, FakeCai):
        def __init__(self, array: np.ndarray) -> None:
            FakeCudaDLPack.__init__(self, array)
            FakeCai.__init__(self, array, stream=0x99)

    producer = Both(np.zeros((1, 3, 4, 4), np.float32))
    array = as_device_array(producer, stream=SESSION_STREAM)
    assert producer.streams == [SESSION_STREAM] and array.stream is None


def test_int_pointer_takes_the_callers_producer_stream() -> None:
    array = device_argument(
        0x7F0000,
        info(),
        session_stream=SESSION_STREAM,
        producer_stream=0x1234,
        device_id=0,
        writable=True,
    )
    assert (array.ptr, array.stream, array.nbytes) == (0x7F0000, 0x1234, 48 * 4)


def test_device_arguments_are_checked() -> None:
    with pytest.raises(cl.TensorError, match="copy_input_to_gpu"):
        as_device_array(np.zeros(4, np.float32), stream=None)  # host DLPack producer
    with pytest.raises(cl.TensorError, match="not device memory"):
        as_device_array(object(), stream=None)
    with pytest.raises(cl.TensorError, match="not CUDA"):
        DeviceArray.from_dlpack(
            FakeCudaDLPack(np.zeros(4, np.float32), (dev.DLPACK_CPU, 0)), stream=1
        )
    wrong = FakeCudaDLPack(np.zeros((1, 3, 4, 4), np.float16))
    with pytest.raises(cl.TensorError, match="does not match"):
        device_argument(
            wrong, info(), session_stream=9, producer_stream=None, device_id=0, writable=False
        )
    other = FakeCudaDLPack(np.zeros((1, 3, 4, 4), np.float32), (dev.DLPACK_CUDA, 1))
    with pytest.raises(cl.TensorError, match="cuda:1"):
        device_argument(
            other, info(), session_stream=9, producer_stream=None, device_id=0, writable=False
        )
    readonly = FakeCai(np.zeros((1, 3, 4, 4), np.float32))
    readonly.interface["data"] = (readonly.array.ctypes.data, True)
    with pytest.raises(cl.TensorError, match="read-only"):
        device_argument(
            readonly, info(), session_stream=9, producer_stream=None, device_id=0, writable=True
        )


# -- our exports ------------------------------------------------------------------------
def test_device_array_exports_cuda_array_interface_and_dlpack() -> None:
    backing = np.zeros(12, np.float32)
    array = DeviceArray(
        backing.ctypes.data, (3, 4), cl.DataType.FLOAT32, device_id=2, owner=backing
    )
    cai = array.__cuda_array_interface__
    assert cai["data"] == (backing.ctypes.data, False)
    assert (cai["shape"], cai["typestr"], cai["version"], cai["stream"]) == ((3, 4), "<f4", 3, None)
    assert array.__dlpack_device__() == (dev.DLPACK_CUDA, 2)
    alive = weakref.ref(array)
    ptr, shape, data_type, device, readonly, owner = import_dlpack(array.__dlpack__(stream=5))
    assert (ptr, shape, data_type, device, readonly) == (
        backing.ctypes.data,
        (3, 4),
        cl.DataType.FLOAT32,
        (dev.DLPACK_CUDA, 2),
        False,
    )
    del array
    gc.collect()
    assert alive() is not None  # the consumer's capsule holds our array
    del owner
    gc.collect()
    assert alive() is None
    versioned = DeviceArray(backing.ctypes.data, (12,), cl.DataType.FLOAT32, readonly=True)
    assert import_dlpack(versioned.__dlpack__(max_version=(1, 0)))[4] is True  # read-only flag
    with pytest.raises(BufferError, match="copy"):
        versioned.__dlpack__(copy=True)


def test_pending_stream_blocks_dlpack_export() -> None:
    array = DeviceArray(0x1000, (4,), cl.DataType.FLOAT32, stream=0x42)
    assert array.__cuda_array_interface__["stream"] == 0x42
    with pytest.raises(BufferError, match="pending"):
        array.__dlpack__(stream=7)


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_exported_capsules_work_with_numpy_as_consumer(max_version: Any) -> None:
    backing = np.zeros(6, np.float32)

    class HostExport:
        def __dlpack__(self, **kwargs: Any) -> Any:
            return export_dlpack(
                backing.ctypes.data,
                (2, 3),
                cl.DataType.FLOAT32,
                (dev.DLPACK_CPU, 0),
                backing,
                max_version=max_version,
            )

        def __dlpack_device__(self) -> tuple[int, int]:
            return (dev.DLPACK_CPU, 0)

    before = len(dev._EXPORTS)
    view = np.from_dlpack(HostExport())
    assert view.shape == (2, 3) and view.ctypes.data == backing.ctypes.data  # shared, no copy
    assert len(dev._EXPORTS) == before + 1
    del view
    gc.collect()
    assert len(dev._EXPORTS) == before  # numpy called our deleter
    unconsumed = HostExport().__dlpack__()
    assert len(dev._EXPORTS) == before + 1
    del unconsumed
    gc.collect()
    assert len(dev._EXPORTS) == before  # the capsule destructor released it


@pytest.mark.parametrize("versioned", [False, True])
def test_import_of_numpy_capsules(versioned: bool) -> None:
    data = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    alive = weakref.ref(data)
    capsule = data.__dlpack__(max_version=(1, 0)) if versioned else data.__dlpack__()
    ptr, shape, data_type, device, _readonly, owner = import_dlpack(capsule)
    assert (ptr, shape, data_type, device) == (
        data.ctypes.data,
        (2, 3, 4),
        cl.DataType.INT64,
        (1, 0),
    )
    with pytest.raises(cl.TensorError, match="unconsumed"):
        import_dlpack(capsule)  # a capsule is consumed once
    del data, capsule
    gc.collect()
    assert alive() is not None
    del owner
    gc.collect()
    assert alive() is None


def test_refused_capsule_keeps_its_own_deleter() -> None:
    data = np.zeros((3, 4), np.float32)
    alive = weakref.ref(data)
    capsule = data.T.__dlpack__()  # strided: refused before it is consumed
    with pytest.raises(cl.TensorError, match="non-packed"):
        import_dlpack(capsule)
    del data
    gc.collect()
    assert alive() is not None
    del capsule
    gc.collect()
    assert alive() is None


def test_capsule_struct_layout_matches_dlpack_h() -> None:
    # dlpack.h on LP64: DLTensor 48 bytes, DLManagedTensor 64, DLManagedTensorVersioned 80.
    assert ctypes.sizeof(dev._DLTensor) == 48
    assert ctypes.sizeof(dev._DLManagedTensor) == 64
    assert ctypes.sizeof(dev._DLManagedTensorVersioned) == 80
    assert dev._DLManagedTensorVersioned.dl_tensor.offset == 32


# -- on a GPU ---------------------------------------------------------------------------
def _reference(x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(
        conv_net().SerializeToString(), providers=["CPUExecutionProvider"]
    )
    result: np.ndarray = session.run(None, {"input": x})[0]
    return result


@pytest.mark.cuda
@requires_cuda
def test_regular_and_zero_copy_paths_match_cpu(onnx_path: Path) -> None:
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    expected = _reference(x)
    with DeviceSession(onnx_path) as session:
        y = np.zeros((1, 10), np.float32)
        session.run_inference(x, y)
        np.testing.assert_allclose(y, expected, rtol=1e-3, atol=1e-3)
        buffers = session.get_device_buffers()
        assert buffers.d_input == buffers.inputs[0].ptr
        session.copy_input_to_gpu(x)
        y2 = np.zeros((1, 10), np.float32)
        for _ in range(3):  # data stays on the GPU between runs
            session.run_inference_device(buffers.d_input, buffers.d_output)
        session.copy_output_to_cpu(y2)
        np.testing.assert_allclose(y2, expected, rtol=1e-3, atol=1e-3)
    with pytest.raises(cl.RunnerClosedError):
        session.get_device_buffers()


@pytest.mark.cuda
@requires_cuda
def test_cupy_round_trip_shares_memory(onnx_path: Path) -> None:
    cupy = pytest.importorskip("cupy")
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    with DeviceSession(onnx_path) as session:
        d_x = cupy.asarray(x)
        d_y = cupy.zeros((1, 10), cupy.float32)
        session.run_inference_device(d_x, d_y)  # DLPack in both directions, no copy
        np.testing.assert_allclose(cupy.asnumpy(d_y), _reference(x), rtol=1e-3, atol=1e-3)
        out = session.get_device_buffers().outputs[0]
        session.run_inference_device(d_x)
        via_dlpack = cupy.from_dlpack(out)
        via_cai = cupy.asarray(out)
        assert via_dlpack.data.ptr == out.ptr == via_cai.data.ptr
        np.testing.assert_allclose(cupy.asnumpy(via_dlpack), _reference(x), rtol=1e-3, atol=1e-3)
        back = as_device_array(via_dlpack, stream=session.stream)
        assert back.ptr == out.ptr


@pytest.mark.cuda
@requires_cuda
def test_torch_round_trip_shares_memory(onnx_path: Path) -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    with DeviceSession(onnx_path) as session:
        t_x = torch.from_numpy(x).cuda()
        t_y = torch.zeros((1, 10), device="cuda")
        session.run_inference_device(t_x, t_y)
        np.testing.assert_allclose(t_y.cpu().numpy(), _reference(x), rtol=1e-3, atol=1e-3)
        out = session.get_device_buffers().outputs[0]
        shared = torch.from_dlpack(out)
        assert shared.data_ptr() == out.ptr
        assert as_device_array(t_y, stream=session.stream).ptr == t_y.data_ptr()


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("handoff", ["dlpack", "cai", "pointer"])
def test_side_stream_producer_then_execute_is_always_ordered(onnx_path: Path, handoff: str) -> None:
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(6)
    frames = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    expected = [_reference(f) for f in frames]
    side = cupy.cuda.Stream(non_blocking=True)
    with DeviceSession(onnx_path) as session:
        sources = [cupy.asarray(f) for f in frames]
        d_in = cupy.empty((1, 3, 16, 16), cupy.float32)
        d_out = cupy.zeros((1, 10), cupy.float32)
        cupy.cuda.Device().synchronize()
        for i in range(40):
            k = i % len(frames)
            with side:  # a slow-ish producer kernel on a side stream, never synchronized
                cupy.multiply(sources[k], 1.0, out=d_in)
                if handoff == "dlpack":
                    session.run_inference_device(d_in, d_out)
                elif handoff == "cai":
                    session.run_inference_device(CaiView(d_in, side.ptr), d_out)
                else:
                    session.run_inference_device(int(d_in.data.ptr), d_out, stream=side.ptr)
            np.testing.assert_allclose(cupy.asnumpy(d_out), expected[k], rtol=1e-3, atol=1e-3)
