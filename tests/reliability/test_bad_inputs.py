"""The bad-input catalogue: every wrong thing a caller can hand the runner, and what happens.

========================================  =================================================
input                                     result
========================================  =================================================
wrong tensor count / frames / non-list    INVALID_INPUT / INVALID_OUTPUT (execute, async)
wrong shape, dtype, layout                INVALID_INPUT / INVALID_OUTPUT
HW info on pageable memory, XRT_BO on     MemoryTypeError at NpuTensor construction
numpy, buffer too small, read-only OUTPUT  TensorError at construction (read-only INPUT: ok)
tensors allocated by another runner       work: host memory is valid for any CPU runner
DMA_FD of a closed fd, pipe, socket,      TensorError at construction
directory, O_RDONLY file
DMA_FD whose fd is closed after wrapping  works: the tensor holds its own duplicate
sub-tensor out of bounds, nested,         TensorError
misaligned or negative offset
unknown / collected / malformed job id    wait() -> INVALID_JOB_ID
negative wait timeout                     waits without limit (documented); returns status
NaN / non-number timeout                  polls (as 0)
callback that raises                      logged; wait() -> FAILURE for that job only
callback that blocks                      other jobs complete (completion order); close()
                                          returns after CLOSE_TIMEOUT_S (see test_close)
options of the wrong type / unknown key   OptionError (a ValueError) at creation
runner used after close                   execute FAILURE, execute_async FAILURE/0,
                                          queries/allocation RunnerClosedError
========================================  =================================================
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import copyless as cl
from copyless.model import CompiledModel
from copyless.runner import Runner, RunnerFactory

S = cl.StatusCode
HW, CPU = cl.TensorType.HW, cl.TensorType.CPU
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
HOST = cl.MemoryType.USER_POINTER_NON_CMA


@pytest.fixture
def runner(compiled: CompiledModel) -> Iterator[Runner]:
    with RunnerFactory.from_compiled(compiled, {"max_concurrent_runs": 4}) as r:
        yield r


def _pair(runner: Runner, view: cl.TensorType = HW) -> tuple[cl.NpuTensor, cl.NpuTensor]:
    (i,), (o,) = runner.get_tensors_info(IN, view), runner.get_tensors_info(OUT, view)
    return runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)


def _reference(net: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(net.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"input": x})[0])


def _with(info: cl.NpuTensorInfo, **changes: Any) -> cl.NpuTensorInfo:
    fields = {"name": info.name, "data_type": info.data_type, "direction": info.direction,
              "tensor_type": info.tensor_type, "memory_layout": info.memory_layout,
              "shape": info.shape}  # fmt: skip
    fields.update(changes)
    return cl.NpuTensorInfo(**fields)


# -- tensor lists, shapes, dtypes ---------------------------------------------------------
def test_wrong_tensor_lists(runner: Runner) -> None:
    x, y = _pair(runner)
    cases = [
        ([], [[y]], S.INVALID_INPUT),
        (None, [[y]], S.INVALID_INPUT),
        ("x", [[y]], S.INVALID_INPUT),
        ([x], [[y]], S.INVALID_INPUT),  # not [batch][tensor]
        ([[x, x]], [[y]], S.INVALID_INPUT),
        ([[]], [[y]], S.INVALID_INPUT),
        ([[x], [x]], [[y], [y]], S.INVALID_INPUT),  # two frames, batch size 1
        ([[x.numpy()]], [[y]], S.INVALID_INPUT),
        ([[x]], [], S.INVALID_OUTPUT),
        ([[x]], [[y, y]], S.INVALID_OUTPUT),
        ([[x]], [[None]], S.INVALID_OUTPUT),
    ]
    for inputs, outputs, expected in cases:
        assert runner.execute(inputs, outputs) is expected, (inputs, outputs)
        handle = runner.execute_async(inputs, outputs)
        assert (handle.status, handle.job_id) == (expected, 0)
    assert runner.execute([[x]], [[y]]) is S.SUCCESS  # still healthy


@pytest.mark.parametrize(
    "change",
    [
        {"shape": (1, 3, 4, 4)},
        {"shape": (3, 8, 8)},
        {"data_type": cl.DataType.FP16},
        {"data_type": cl.DataType.INT8},
        {"memory_layout": cl.MemoryLayout.NHWC},
    ],
    ids=["small-shape", "rank", "fp16", "int8", "layout"],
)
@pytest.mark.parametrize("side", ["input", "output"])
def test_wrong_shape_dtype_layout(runner: Runner, change: dict[str, Any], side: str) -> None:
    x, y = _pair(runner)
    if side == "input":
        bad = _with(x.info, **change)
        tensor = runner.allocate_npu_tensor(bad)
        assert runner.execute([[tensor]], [[y]]) is S.INVALID_INPUT
    else:
        tensor = runner.allocate_npu_tensor(_with(y.info, **change))
        assert runner.execute([[x]], [[tensor]]) is S.INVALID_OUTPUT


def test_memory_type_and_size_refusals(runner: Runner) -> None:
    (i,) = runner.get_tensors_info(IN, HW)
    with pytest.raises(cl.MemoryTypeError):  # HW view on pageable memory
        cl.NpuTensor(i, np.zeros(i.shape, np.float32), HOST)
    with pytest.raises(cl.MemoryTypeError):  # XRT_BO comes from the runner
        cl.NpuTensor(i, np.zeros(i.shape, np.float32), cl.MemoryType.XRT_BO)
    cpu = _with(i, tensor_type=CPU)
    with pytest.raises(cl.TensorError):  # too small
        cl.NpuTensor(cpu, np.zeros(cpu.size - 1, np.float32), HOST)
    frozen = np.zeros(cpu.shape, np.float32)
    frozen.flags.writeable = False
    cl.NpuTensor(cpu, frozen, HOST)  # read-only is fine for an INPUT ...
    out = _with(runner.get_tensors_info(OUT, HW)[0], tensor_type=CPU)
    frozen_out = np.zeros(out.shape, np.float32)
    frozen_out.flags.writeable = False
    with pytest.raises(cl.TensorError, match="read-only"):  # ... refused for an OUTPUT
        cl.NpuTensor(out, frozen_out, HOST)
    with pytest.raises(cl.TensorError, match="read-only"):
        cl.NpuTensor(out, b"\0" * out.size_in_bytes, HOST)  # bytes: read-only
    with pytest.raises((cl.CopylessError, ValueError)):
        cl.NpuTensor(cpu, np.zeros(cpu.shape, np.float32), "USER_POINTER_NON_CMA")  # type: ignore[arg-type]
    with pytest.raises((cl.CopylessError, ValueError)):
        runner.allocate_npu_tensor("input")  # type: ignore[arg-type]


def test_tensors_of_another_runner_work(
    compiled: CompiledModel, net: onnx.ModelProto, runner: Runner
) -> None:
    """Runner-allocated memory is host memory, valid for any CPU runner: it works."""
    x, y = _pair(runner)
    x.numpy()[...] = np.random.default_rng(3).standard_normal(x.info.shape)
    with RunnerFactory.from_compiled(compiled) as other:
        assert other.execute([[x]], [[y]]) is S.SUCCESS
    np.testing.assert_allclose(y.numpy(), _reference(net, x.numpy().copy()), rtol=1e-5, atol=1e-5)


# -- file descriptors ---------------------------------------------------------------------
def test_dma_fd_refusals(runner: Runner, tmp_path: Path) -> None:
    (i,) = runner.get_tensors_info(IN, HW)
    fd = os.memfd_create("closed")
    os.close(fd)
    with pytest.raises(cl.TensorError):
        cl.NpuTensor(i, fd, cl.MemoryType.DMA_FD)
    for bad in (-1, 10**9, True, "3", None):
        with pytest.raises((cl.TensorError, cl.MemoryTypeError)):
            cl.NpuTensor(i, bad, cl.MemoryType.DMA_FD)
    r, w = os.pipe()
    a, b = socket.socketpair()
    ro = tmp_path / "ro.bin"
    ro.write_bytes(b"\0" * i.size_in_bytes)
    ro_fd = os.open(ro, os.O_RDONLY)
    dir_fd = os.open(tmp_path, os.O_RDONLY)
    small = os.memfd_create("small")
    os.ftruncate(small, 16)
    try:
        for bad in (r, w, a.fileno(), ro_fd, dir_fd, small):
            with pytest.raises(cl.TensorError):
                cl.NpuTensor(i, bad, cl.MemoryType.DMA_FD)
    finally:
        for fd_ in (r, w, ro_fd, dir_fd, small):
            os.close(fd_)
        a.close()
        b.close()


def test_dma_fd_closed_after_wrapping_still_works(runner: Runner, net: onnx.ModelProto) -> None:
    (i,), (o,) = runner.get_tensors_info(IN, HW), runner.get_tensors_info(OUT, HW)
    fds = [os.memfd_create(name, os.MFD_ALLOW_SEALING) for name in ("in", "out")]
    for fd, info in zip(fds, (i, o), strict=True):
        os.ftruncate(fd, info.size_in_bytes)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    x = cl.NpuTensor(i, fds[0], cl.MemoryType.DMA_FD)
    y = cl.NpuTensor(o, fds[1], cl.MemoryType.DMA_FD)
    for fd in fds:
        os.close(fd)  # the tensors hold their own duplicates
    x.numpy()[...] = 0.5
    assert runner.execute([[x]], [[y]]) is S.SUCCESS
    np.testing.assert_allclose(y.numpy(), _reference(net, x.numpy().copy()), rtol=1e-5, atol=1e-5)
    x.close()
    y.close()


# -- sub-tensors --------------------------------------------------------------------------
def test_sub_tensor_refusals(runner: Runner) -> None:
    (i,) = runner.get_tensors_info(IN, HW)
    parent = runner.allocate_npu_tensor(_with(i, shape=(2, 3, 8, 8)))
    for offset in (i.size_in_bytes + 4, 2 * i.size_in_bytes, -4, 2, 1.0, True):
        with pytest.raises(cl.TensorError):
            runner.allocate_sub_tensor(parent, i, offset)  # type: ignore[arg-type]
    sub = runner.allocate_sub_tensor(parent, i, i.size_in_bytes)
    with pytest.raises(cl.TensorError):  # one nesting level
        runner.allocate_sub_tensor(sub, _with(i, shape=(1, 3, 8, 4)), 0)
    with pytest.raises(cl.TensorError):
        runner.allocate_sub_tensor(np.zeros(10), i, 0)  # type: ignore[arg-type]


def test_sub_tensors_of_one_parent_execute(runner: Runner, net: onnx.ModelProto) -> None:
    (i,), (o,) = runner.get_tensors_info(IN, HW), runner.get_tensors_info(OUT, HW)
    arena = runner.allocate_npu_tensor(_with(i, shape=(1, 3 * 8 * 8 + 64)))
    x = runner.allocate_sub_tensor(arena, i, 0)
    y = runner.allocate_sub_tensor(arena, _with(o, direction=OUT), x.info.size_in_bytes)
    x.numpy()[...] = 2.0
    assert runner.execute([[x]], [[y]]) is S.SUCCESS
    np.testing.assert_allclose(y.numpy(), _reference(net, x.numpy().copy()), rtol=1e-5, atol=1e-5)


# -- job ids and timeouts -----------------------------------------------------------------
def test_unknown_collected_and_malformed_job_ids(runner: Runner) -> None:
    for bad in (cl.JobHandle(S.SUCCESS, 999), 0, -1, 999, None, "1", 1.0, True, object()):
        assert runner.wait(bad, 0) is S.INVALID_JOB_ID, bad  # type: ignore[arg-type]
    x, y = _pair(runner)
    handle = runner.execute_async([[x]], [[y]])
    assert runner.wait(handle, -1) is S.SUCCESS  # negative: no limit
    assert runner.wait(handle, -1) is S.INVALID_JOB_ID  # collected; no hang
    assert runner.wait(handle.job_id, 0) is S.INVALID_JOB_ID


def test_odd_timeouts(runner: Runner) -> None:
    x, y = _pair(runner)
    for timeout in (float("nan"), "soon", None, -5, -0.5, 10**12):
        handle = runner.execute_async([[x]], [[y]])
        status = runner.wait(handle, timeout)
        if status is S.JOB_PENDING:  # NaN / non-number poll
            status = runner.wait(handle, -1)
        assert status is S.SUCCESS, timeout


# -- callbacks ----------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["submission", "completion"])
def test_callback_that_raises_only_fails_its_job(compiled: CompiledModel, order: str) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def callback(handle: cl.JobHandle) -> None:
        with lock:
            seen.append(handle.job_id)
        if handle.job_id % 3 == 0:
            raise RuntimeError(f"callback of {handle.job_id} fails on purpose")

    with RunnerFactory.from_compiled(
        compiled, {"max_concurrent_runs": 3, "callback_order": order, "log_level": "ERROR"}
    ) as runner:
        pairs = [_pair(runner) for _ in range(3)]
        handles = []
        for k in range(30):
            x, y = pairs[k % 3]
            handle = runner.execute_async([[x]], [[y]], callback)
            assert handle.status is S.SUCCESS
            handles.append(handle)
            if len(handles) == 3:  # keep within max_concurrent_runs
                h = handles.pop(0)
                assert runner.wait(h, -1) is (S.FAILURE if h.job_id % 3 == 0 else S.SUCCESS)
        for h in handles:
            assert runner.wait(h, -1) is (S.FAILURE if h.job_id % 3 == 0 else S.SUCCESS)
        assert runner.get_property("callback_errors") == 10
        assert sorted(seen) == list(range(1, 31))
        assert runner.execute(*([[t]] for t in pairs[0])) is S.SUCCESS


def test_blocking_callback_does_not_stop_other_jobs(compiled: CompiledModel) -> None:
    release = threading.Event()
    with RunnerFactory.from_compiled(
        compiled, {"max_concurrent_runs": 4, "callback_order": "completion"}
    ) as runner:
        pairs = [_pair(runner) for _ in range(4)]
        first = runner.execute_async([[pairs[0][0]]], [[pairs[0][1]]], lambda h: release.wait(30))
        others = [runner.execute_async([[x]], [[y]]) for x, y in pairs[1:]]
        try:
            assert [runner.wait(h, 10_000) for h in others] == [S.SUCCESS] * 3
            assert runner.wait(first, 0) is S.JOB_PENDING
        finally:
            release.set()
        assert runner.wait(first, 10_000) is S.SUCCESS


# -- options and lifecycle ----------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        {"max_concurrent_runs": "2"},
        {"max_concurrent_runs": 0},
        {"max_concurrent_runs": 2.5},
        {"async_threadpool_depth": -1},
        {"debug": "yes"},
        {"input_tensor_type": "GPU"},
        {"callback_order": 1},
        {"log_level": "LOUD"},
        {"device": 0},
        {"no_such_option": 1},
        {"cma_index": None},
        {"skip_in_bo_sync": 1.0},
        {1: "x"},
    ],
)
def test_options_of_the_wrong_type(compiled: CompiledModel, options: dict[Any, Any]) -> None:
    with pytest.raises(cl.OptionError):
        RunnerFactory.from_compiled(compiled, options)


def test_options_that_are_not_a_mapping(compiled: CompiledModel, rai_path: Path) -> None:
    for options in ("max_concurrent_runs=2", [("debug", True)], 5):
        with pytest.raises(cl.OptionError):
            RunnerFactory.from_compiled(compiled, options)  # type: ignore[arg-type]
        with pytest.raises(cl.OptionError):
            RunnerFactory.create_runner(rai_path, options)  # type: ignore[arg-type]
    with pytest.raises(cl.OptionError):
        RunnerFactory.from_compiled(compiled, None, "ONNXRUNTIME")  # type: ignore[arg-type]
    for bad_path in (None, 5, b"\xff"):
        with pytest.raises(cl.ModelLoadError):
            RunnerFactory.create_runner(bad_path)  # type: ignore[arg-type]


def test_runner_used_after_close(compiled: CompiledModel) -> None:
    runner = RunnerFactory.from_compiled(compiled)
    x, y = _pair(runner)
    handle = runner.execute_async([[x]], [[y]])
    runner.close()
    runner.close()  # idempotent
    assert runner.wait(handle, 1000) in (S.SUCCESS, S.FAILURE)
    assert runner.execute([[x]], [[y]]) is S.FAILURE
    assert runner.execute_async([[x]], [[y]]) == cl.JobHandle(S.FAILURE, 0)
    assert runner.wait(handle, 0) is S.INVALID_JOB_ID
    for call in (
        lambda: runner.get_tensors_info(IN),
        lambda: runner.get_num_input_tensors(),
        lambda: runner.get_property("backend"),
        lambda: runner.get_tensor_info_by_name("input"),
        lambda: runner.allocate_npu_tensor(x.info),
        lambda: runner.allocate_sub_tensor(x, x.info, 0),
    ):
        with pytest.raises(cl.RunnerClosedError):
            call()
    # Tensors allocated by a closed runner stay valid memory.
    x.numpy()[...] = 1.0
    assert float(x.numpy().sum()) == x.info.size
