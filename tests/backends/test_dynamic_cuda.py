"""Data-dependent outputs on the CUDA backend (onnxruntime allocates them on the GPU and the
context copies the produced bytes into the caller's host or device memory). Marked ``cuda``:
skipped, with the reason, without onnxruntime-gpu and an NVIDIA device."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import copyless as cl
from copyless.backends._cuda import CudaBackend
from copyless.model import CompiledModel, compile_to_memory
from copyless.runner import RunnerFactory
from copyless.runner._options import RunnerOptions
from cuda_helpers import requires_cuda
from model_helpers import nonzero_net, with_nonzeros

pytestmark = [pytest.mark.cuda, requires_cuda]
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
S = cl.StatusCode


@pytest.fixture(scope="module")
def compiled() -> CompiledModel:
    return compile_to_memory(nonzero_net())


def test_changing_shapes_too_small_and_async_on_the_gpu(compiled) -> None:
    with RunnerFactory.from_compiled(compiled, {"device": "cuda"}) as runner:
        x = runner.allocate_npu_tensor(runner.get_tensors_info(IN)[0])
        nz_info, r_info = runner.get_tensors_info(OUT)
        assert nz_info.shape == (2, 12)
        nz = runner.allocate_npu_tensor(nz_info)
        small = runner.allocate_npu_tensor(dataclasses.replace(nz_info, shape=(2, 4)))
        r = runner.allocate_npu_tensor(r_info)
        for step, count in enumerate([3, 7, 1, 12, 0]):
            expected = with_nonzeros(x.numpy(), count, step)
            assert runner.execute([[x]], [[nz, r]]) is S.SUCCESS
            assert nz.produced_shape == expected.shape
            np.testing.assert_array_equal(nz.numpy().reshape(-1)[: expected.size], expected.ravel())
            status = runner.execute([[x]], [[small, r]])
            assert status is (S.SUCCESS if count <= 4 else S.INVALID_OUTPUT)
            assert small.produced_shape == expected.shape
        jobs = []
        for i in range(2):
            xi = runner.allocate_npu_tensor(x.info)
            yi = runner.allocate_npu_tensor(nz_info)
            ri = runner.allocate_npu_tensor(r_info)
            expected = with_nonzeros(xi.numpy(), 2 + 5 * i, 10 + i)
            jobs.append((runner.execute_async([[xi]], [[yi, ri]]), yi, expected, xi, ri))
        for handle, yi, expected, *_held in jobs:
            assert runner.wait(handle, 10_000) is S.SUCCESS
            assert yi.produced_shape == expected.shape
            np.testing.assert_array_equal(yi.numpy().reshape(-1)[: expected.size], expected.ravel())


def test_dynamic_output_into_device_memory(compiled) -> None:
    cupy = pytest.importorskip("cupy")
    engine = CudaBackend(RunnerOptions(device="cuda")).load(compiled.partitions[0], 1)
    context = engine.new_context()
    x = np.zeros((3, 4), np.float32)
    expected = with_nonzeros(x, 5, 0)
    d_x = cupy.asarray(x)
    d_nz = cupy.full(24, -1, cupy.int64)
    d_r = cupy.zeros((3, 4), cupy.float32)
    context.bind_input("x", int(d_x.data.ptr), cl.DataType.FLOAT32, (3, 4))
    context.bind_output("r", int(d_r.data.ptr), cl.DataType.FLOAT32, (3, 4))
    context.bind_output_dynamic("nz", int(d_nz.data.ptr), cl.DataType.INT64, (2, 12))
    context.run()
    assert context.produced_shape("nz") == (2, 5)
    got = cupy.asnumpy(d_nz)
    np.testing.assert_array_equal(got[:10].reshape(2, 5), expected)
    assert (got[10:] == -1).all()
    context.close()
    engine.close()
