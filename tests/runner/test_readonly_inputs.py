"""Read-only input buffers (Ray's object store, ``np.frombuffer(bytes)``, read-only mmaps)
bind as INPUT without a copy, on every backend, HW and CPU views, sync and async; a
read-only OUTPUT is refused at construction."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest
from runner_helpers import reference, tensors

import copyless as cl

HW, CPU = cl.TensorType.HW, cl.TensorType.CPU
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
CMA, PAGEABLE = cl.MemoryType.USER_POINTER_CMA, cl.MemoryType.USER_POINTER_NON_CMA
OK = cl.StatusCode.SUCCESS


def _frozen(data: np.ndarray) -> np.ndarray:
    frozen = data.copy()
    frozen.flags.writeable = False
    return frozen


def _from_bytes(data: np.ndarray) -> np.ndarray:
    return np.frombuffer(data.tobytes(), data.dtype).reshape(data.shape)


def _mmap(data: np.ndarray, tmp_path: Path) -> mmap.mmap:
    path = tmp_path / "frame.bin"
    path.write_bytes(data.tobytes())
    with open(path, "rb") as handle:
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


@pytest.mark.parametrize("source", ["frozen", "frombuffer", "mmap"])
@pytest.mark.parametrize("view", [HW, CPU], ids=["hw", "cpu"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_read_only_inputs_execute_in_place(tiny, make_runner, tmp_path, source, view, mode):
    model, compiled = tiny
    runner = make_runner(compiled, input_tensor_type=view.name, output_tensor_type=view.name)
    in_info = runner.get_tensors_info(IN, view)[0]
    data = np.random.default_rng(7).standard_normal(in_info.shape).astype(np.float32)
    buffer = {"frozen": _frozen, "frombuffer": _from_bytes}.get(source)
    memory = _mmap(data, tmp_path) if buffer is None else buffer(data)
    x = cl.NpuTensor(in_info, memory, CMA if view is HW else PAGEABLE)
    assert not x.numpy().flags.writeable  # the view is honest about the memory
    if isinstance(memory, np.ndarray):  # bound where it is: no copy was made
        assert x.get_virtual_address() == memory.ctypes.data
    _, y = tensors(runner, view)
    if mode == "sync":
        assert runner.execute([[x]], [[y]]) is OK
    else:
        job = runner.execute_async([[x]], [[y]])
        assert job.status is OK and runner.wait(job, 10_000) is OK
    (expected,) = reference(model, {"input": data})
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)
    del x
    if isinstance(memory, mmap.mmap):
        memory.close()


def test_read_only_outputs_are_refused(tiny, make_runner) -> None:
    _, compiled = tiny
    runner = make_runner(compiled)
    out_info = runner.get_tensors_info(OUT, HW)[0]
    frozen = _frozen(np.zeros(out_info.shape, np.float32))
    with pytest.raises(cl.TensorError, match=r"read-only.*OUTPUT"):
        cl.NpuTensor(out_info, frozen, CMA)
    with pytest.raises(cl.TensorError, match="read-only"):
        cl.NpuTensor(out_info, bytes(out_info.size_in_bytes), CMA)


def test_output_sub_tensor_of_a_read_only_parent_is_refused(tiny, make_runner) -> None:
    _, compiled = tiny
    runner = make_runner(compiled)
    in_info = runner.get_tensors_info(IN, HW)[0]
    out_info = runner.get_tensors_info(OUT, HW)[0]
    size = max(in_info.size_in_bytes, out_info.size_in_bytes)
    parent = cl.NpuTensor(in_info, bytes(size), CMA)
    assert runner.allocate_sub_tensor(parent, in_info, 0).numpy().shape == in_info.shape
    with pytest.raises(cl.TensorError, match="read-only"):
        runner.allocate_sub_tensor(parent, out_info, 0)


@pytest.mark.parametrize("view", [HW, CPU], ids=["hw", "cpu"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_read_only_input_in_an_output_position_is_refused(
    tiny, make_runner, tmp_path, view, mode
):
    # fuzz_runner finding: an INPUT tensor over a read-only mmap passed as an output was
    # bound in place and the engine's write killed the process (SIGSEGV); a CPU view failed
    # later, inside the conversion. Refused up front now, the process and the memory intact.
    _, compiled = tiny
    runner = make_runner(compiled, input_tensor_type=view.name, output_tensor_type=view.name)
    in_info = runner.get_tensors_info(IN, view)[0]
    if runner.get_tensors_info(OUT, view)[0].shape != in_info.shape:
        in_info = runner.get_tensors_info(OUT, view)[0]  # an output-shaped read-only tensor
        in_info = cl.NpuTensorInfo(in_info.name, in_info.data_type, IN, in_info.tensor_type,
                                   in_info.memory_layout, in_info.shape)  # fmt: skip
    data = np.zeros(in_info.size_in_bytes // 4, np.float32)
    frozen = cl.NpuTensor(in_info, _mmap(data, tmp_path), CMA if view is HW else PAGEABLE)
    x, _ = tensors(runner, view)
    if mode == "sync":
        assert runner.execute([[x]], [[frozen]]) is cl.StatusCode.INVALID_OUTPUT
    else:
        assert runner.execute_async([[x]], [[frozen]]).status is cl.StatusCode.INVALID_OUTPUT
    assert not frozen.numpy().any()
