"""The C fast path (runner/_fast.c): repeated sync calls on the same bound tensors.

Every test checks results against onnxruntime on the source model, and that the fast path
was (or was not) the one that ran, through the runner's ``fast_calls`` counter.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from collections.abc import Callable

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from runner_helpers import conv_net, reference, tensors

import copyless as cl
from copyless.model import CompiledModel, compile_to_memory
from copyless.runner import Runner

HW, CPU = cl.TensorType.HW, cl.TensorType.CPU
OK = cl.StatusCode.SUCCESS


def _fill(tensor: cl.NpuTensor, seed: int) -> np.ndarray:
    data = np.random.default_rng(seed).standard_normal(tensor.info.shape).astype(np.float32)
    tensor.numpy()[...] = data
    return data


def _check(y: cl.NpuTensor, model: onnx.ModelProto, data: np.ndarray) -> None:
    expected = reference(model, {"input": data})[0]
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_repeated_calls_are_replayed_with_fresh_results(
    tiny: tuple[onnx.ModelProto, CompiledModel], make_runner: Callable[..., Runner]
) -> None:
    model, compiled = tiny
    runner = make_runner(compiled)
    x, y = tensors(runner, HW)
    for seed in range(6):
        data = _fill(x, seed)
        assert runner.execute([[x]], [[y]]) is OK
        _check(y, model, data)
    # first call plans, second installs, the remaining four replay
    assert runner.get_property("fast_calls") == 4
    assert runner.get_property("jobs_run") == 6


def test_other_tensors_and_mutated_lists_take_the_python_path(
    tiny: tuple[onnx.ModelProto, CompiledModel], make_runner: Callable[..., Runner]
) -> None:
    model, compiled = tiny
    runner = make_runner(compiled)
    x, y = tensors(runner, HW)
    x2, y2 = tensors(runner, HW)
    inputs, outputs = [[x]], [[y]]
    _fill(x, 1)
    for _ in range(3):
        assert runner.execute(inputs, outputs) is OK
    replayed = runner.get_property("fast_calls")
    assert replayed >= 1
    data = _fill(x2, 2)
    inputs[0][0] = x2  # same list object, other tensor: the identity check must see it
    outputs[0] = (y2,)
    assert runner.execute(inputs, outputs) is OK
    assert runner.get_property("fast_calls") == replayed
    _check(y2, model, data)


def test_closed_tensor_is_refused_after_install(
    tiny: tuple[onnx.ModelProto, CompiledModel], make_runner: Callable[..., Runner]
) -> None:
    _, compiled = tiny
    runner = make_runner(compiled)
    x, y = tensors(runner, HW)
    _fill(x, 3)
    for _ in range(3):
        assert runner.execute([[x]], [[y]]) is OK
    y.close()
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.INVALID_OUTPUT
    x.close()
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.INVALID_INPUT


def test_cpu_view_calls_never_take_the_fast_path(
    tiny: tuple[onnx.ModelProto, CompiledModel], make_runner: Callable[..., Runner]
) -> None:
    model, compiled = tiny
    runner = make_runner(compiled)
    x, y = tensors(runner, CPU)
    for seed in range(4):
        data = _fill(x, seed)
        assert runner.execute([[x]], [[y]]) is OK
        _check(y, model, data)
    assert runner.get_property("fast_calls") == 0


def test_closed_runner_refuses_a_replayable_call(
    tiny: tuple[onnx.ModelProto, CompiledModel], make_runner: Callable[..., Runner]
) -> None:
    _, compiled = tiny
    runner = make_runner(compiled)
    x, y = tensors(runner, HW)
    for _ in range(3):
        assert runner.execute([[x]], [[y]]) is OK
    runner.close()
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.FAILURE


def _gather_model() -> onnx.ModelProto:
    """y = data[indices]: an engine error at run time when an index is out of range."""
    graph = oh.make_graph(
        [oh.make_node("Gather", ["data", "indices"], ["y"], axis=0)],
        "gather",
        [
            oh.make_tensor_value_info("data", onnx.TensorProto.FLOAT, [4]),
            oh.make_tensor_value_info("indices", onnx.TensorProto.INT64, [2]),
        ],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_engine_error_in_a_replayed_call_is_a_status() -> None:
    # onnxruntime checks Gather's indices at run time (OpenVINO's CPU plugin does not):
    # pinned, since the default runner measures both engines and OpenVINO may win
    compiled = compile_to_memory(_gather_model())
    with cl.RunnerFactory.from_compiled(compiled, None, cl.RunnerType.ONNXRUNTIME) as runner:
        _replay_engine_error(runner)


def _replay_engine_error(runner: Runner) -> None:
    infos = runner.get_tensors_info(cl.TensorDirection.INPUT, HW)
    data, indices = (runner.allocate_npu_tensor(i) for i in infos)
    (y_info,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, HW)
    y = runner.allocate_npu_tensor(y_info)
    data.numpy()[...] = [10, 20, 30, 40]
    indices.numpy()[...] = [3, 1]
    for _ in range(3):
        assert runner.execute([[data, indices]], [[y]]) is OK
    assert runner.get_property("fast_calls") >= 1
    np.testing.assert_array_equal(y.numpy(), [40, 20])
    indices.numpy()[...] = [9, 0]
    assert runner.execute([[data, indices]], [[y]]) is cl.StatusCode.RUNTIME_ERROR
    indices.numpy()[...] = [0, 2]
    assert runner.execute([[data, indices]], [[y]]) is OK
    np.testing.assert_array_equal(y.numpy(), [10, 30])


@pytest.fixture(scope="module")
def slow() -> tuple[onnx.ModelProto, CompiledModel]:
    """A conv net big enough that one call takes tens of milliseconds."""
    model = conv_net(size=512, channels=64)
    return model, compile_to_memory(model)


def _while_replaying(runner: Runner, x: cl.NpuTensor, y: cl.NpuTensor) -> threading.Thread:
    """Start a replayed call on another thread; return once it is inside the engine."""
    statuses: list[cl.StatusCode] = []
    thread = threading.Thread(target=lambda: statuses.append(runner.execute([[x]], [[y]])))
    before = runner.get_property("fast_calls")
    thread.start()
    deadline = time.monotonic() + 10
    while not runner._fast.busy:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail(f"the fast path never ran (statuses {statuses}, replayed {before})")
        time.sleep(0)
    return thread


def test_a_call_on_memory_a_replayed_call_writes_is_refused(
    slow: tuple[onnx.ModelProto, CompiledModel],
) -> None:
    _, compiled = slow
    with cl.RunnerFactory.from_compiled(compiled, {"num_threads": 1}) as runner:
        x, y = tensors(runner, HW)
        other_x, _ = tensors(runner, HW)
        for _ in range(2):
            assert runner.execute([[x]], [[y]]) is OK
        thread = _while_replaying(runner, x, y)
        # same output memory, other input: must not run while the replayed call writes y
        refused = runner.execute([[other_x]], [[y]])
        async_refused = runner.execute_async([[other_x]], [[y]])
        thread.join()
        assert refused is cl.StatusCode.INVALID_OUTPUT
        assert async_refused.status is cl.StatusCode.INVALID_OUTPUT
        # and once it is done, the same call runs
        assert runner.execute([[other_x]], [[y]]) is OK


def test_async_jobs_in_flight_send_sync_calls_through_conflict_checks(
    slow: tuple[onnx.ModelProto, CompiledModel],
) -> None:
    _, compiled = slow
    with cl.RunnerFactory.from_compiled(compiled, {"num_threads": 1}) as runner:
        x, y = tensors(runner, HW)
        for _ in range(3):
            assert runner.execute([[x]], [[y]]) is OK
        replayed = runner.get_property("fast_calls")
        job = runner.execute_async([[x]], [[y]])
        assert job.status is OK
        # y belongs to the job (tens of ms): the replay must not run, the Python path refuses
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.INVALID_OUTPUT
        assert runner.get_property("fast_calls") == replayed
        assert runner.wait(job, 10_000) is OK
        assert runner.execute([[x]], [[y]]) is OK
        assert runner.get_property("fast_calls") == replayed + 1


def _open_files() -> set[tuple[int, int]]:
    """(device, inode) of every file this process holds open, by any thread."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile by another thread
            continue
        found.add((st.st_dev, st.st_ino))
    return found


def _mapped_files() -> set[tuple[int, int]]:
    """(device, inode) of every file this process maps."""
    found = set()
    with open("/proc/self/maps") as maps:
        for fields in map(str.split, maps):
            major, minor = (int(part, 16) for part in fields[3].split(":"))
            found.add((os.makedev(major, minor), int(fields[4])))
    return found


def _memory_of(tensor: cl.NpuTensor) -> tuple[int, int]:
    st = os.fstat(tensor.get_buffer().fd)  # a runner-allocated tensor's memfd
    return st.st_dev, st.st_ino


def test_released_tensors_are_not_kept_alive_by_the_runner(
    tiny: tuple[onnx.ModelProto, CompiledModel], make_runner: Callable[..., Runner]
) -> None:
    """Neither the plan cache nor the fast path holds tensors: their memory and fds go.

    Checked on the tensors' own memfds (no descriptor and no mapping of them is left), not
    on the process's fd count, which other threads (engines, finalizers) change at will."""
    _, compiled = tiny
    runner = make_runner(compiled)
    refs = []
    memories = set()
    for round_ in range(3):  # fresh tensors each round: cached and installed, then dropped
        x, y = tensors(runner, HW)
        for view in (HW, CPU):
            if view is CPU:
                x, y = tensors(runner, CPU)
            memories |= {_memory_of(x), _memory_of(y)}
            _fill(x, round_)
            for _ in range(3):
                assert runner.execute([[x]], [[y]]) is OK
            refs += [weakref.ref(x), weakref.ref(y)]
        del x, y
    gc.collect()
    assert [r for r in refs if r() is not None] == []
    assert len(memories) == 12
    assert not memories & _open_files()
    assert not memories & _mapped_files()
    assert runner.get_property("fast_calls") >= 3


def test_threads_replaying_their_own_tensors_get_their_own_results(
    tiny: tuple[onnx.ModelProto, CompiledModel], make_runner: Callable[..., Runner]
) -> None:
    """More threads than fast-path entries, each looping on its tensors: entries are
    replaced, replays and Python-path calls interleave, every result is the thread's own."""
    model, compiled = tiny
    runner = make_runner(compiled)
    errors: list[str] = []
    expected = {}
    for seed in range(6):
        data = np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)
        expected[seed] = (data, reference(model, {"input": data})[0])

    def worker(seed: int) -> None:
        x, y = tensors(runner, HW)
        data, want = expected[seed]
        x.numpy()[...] = data
        for i in range(150):
            y.numpy()[...] = 0
            status = runner.execute([[x]], [[y]])
            if status is not OK or not np.allclose(y.numpy(), want, rtol=1e-4, atol=1e-5):
                errors.append(f"thread {seed} call {i}: {status.name}")
                return

    threads = [threading.Thread(target=worker, args=(s,)) for s in expected]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert runner.get_property("jobs_run") == 150 * len(expected)
    # (under full contention the Python path may have taken every call: that is allowed)
    before = runner.get_property("fast_calls")
    x, y = tensors(runner, HW)
    for _ in range(3):
        assert runner.execute([[x]], [[y]]) is OK
    assert runner.get_property("fast_calls") == before + 1


def test_python_path_calls_do_not_reinstall_a_replayable_plan(
    tiny: tuple[onnx.ModelProto, CompiledModel], make_runner: Callable[..., Runner]
) -> None:
    """While another holder keeps the fast path out, repeated calls run on the Python path;
    they must not give the already installed plan another slot (and binding) each time."""
    model, compiled = tiny
    runner = make_runner(compiled)
    x, y = tensors(runner, HW)
    data = _fill(x, 5)
    for _ in range(3):
        assert runner.execute([[x]], [[y]]) is OK
    replayed = runner.get_property("fast_calls")
    runner._fast.enter()  # a Python-path holder (as an async job in flight would be)
    try:
        assert runner.execute([[x]], [[y]]) is OK  # needs a slot of its own: the entry's is held
        slots = len(runner._engines.slots_made)
        for _ in range(5):
            assert runner.execute([[x]], [[y]]) is OK
    finally:
        runner._fast.leave()
    assert len(runner._engines.slots_made) == slots
    assert runner.get_property("fast_calls") == replayed
    assert runner.execute([[x]], [[y]]) is OK
    assert runner.get_property("fast_calls") == replayed + 1
    _check(y, model, data)


def test_a_fast_path_made_without_init_is_safe_to_call() -> None:
    # fuzz_runner finding: FastPath.__new__ left the attribute name NULL; a call after an
    # install then crashed (segfault) in the "is the tensor closed" lookup.
    from copyless.runner._fast import FastPath

    class Tensor:
        _span = b"open"  # what the fast path reads: None once a tensor is closed

    x, y = Tensor(), Tensor()
    path = FastPath.__new__(FastPath)
    assert path.install((x, y), (1, 1), (1, 1), (), None) == 0
    assert path([[x]], [[y]]) is None  # the default success object
    assert path.count == 1


@pytest.mark.parametrize("rows", [(2**62, 4), (0, 1), (65, 1), (-1, -1)])
def test_install_refuses_row_shapes_past_the_tensor_limit(rows: tuple[int, int]) -> None:
    # fuzz_runner finding (UBSan): 2**62 * 4 overflowed to 0 and the entry was installed.
    from copyless.runner._fast import FastPath

    path = FastPath(OK)
    with pytest.raises(ValueError, match="rows and cols"):
        path.install((object(),), rows, (1, 1), (), None)
