"""The CUDA backend's Python wiring on a machine without a GPU: a runner with
``device="cuda"`` whose sessions are CPU sessions and whose CuPy is a recorder.

What is faked: the availability check, CuPy (streams are numbers, events are recorded
calls) and the provider list (the session runs on ONNX Runtime's CPU provider). What is
real: the runner, plans, slots, replays and async jobs driving CudaBackend, CudaEngine and
CudaContext, with host memory bound as the CUDA context binds it. This proves the wiring
(lanes per slot, one lane on a given stream, producer-stream ordering, refusals), not that
anything runs on a GPU: the ``cuda``-marked tests do that.
"""

from __future__ import annotations

import contextlib
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

import copyless as cl
from copyless.backends import _cuda as cuda_backend
from copyless.backends._onnxruntime import create_session
from copyless.memory import _device as cuda_memory
from copyless.model import compile_to_memory
from copyless.runner import RunnerFactory
from model_helpers import conv_net

IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT


class Recorder:
    """CuPy as far as the backend uses it; every runtime call is appended to ``calls``."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.handles = itertools.count(0x1000)
        recorder = self

        class Stream:
            def __init__(self, non_blocking: bool = False) -> None:
                self.ptr = next(recorder.handles)
                self.non_blocking = non_blocking
                recorder.calls.append(("stream", self.ptr, non_blocking))

            def synchronize(self) -> None:
                recorder.calls.append(("sync", self.ptr))

        runtime = SimpleNamespace(
            eventDisableTiming=2,
            eventCreateWithFlags=lambda flags: self._log("create", next(self.handles)),
            eventRecord=lambda event, stream: self._log("record", event, stream),
            streamWaitEvent=lambda stream, event, flags: self._log("wait", stream, event),
            eventDestroy=lambda event: self._log("destroy", event),
        )
        self.cuda = SimpleNamespace(
            runtime=runtime, Stream=Stream, Device=lambda index: contextlib.nullcontext()
        )

    def _log(self, *call: object) -> object:
        self.calls.append(call)
        return call[-1] if call[0] == "create" else None


@pytest.fixture
def fake_gpu(monkeypatch) -> tuple[Recorder, list[int]]:
    recorder, streams = Recorder(), []

    def cpu_session(self, partition, num_threads, stream):  # the provider list, minus CUDA
        streams.append(stream)
        return create_session(partition, num_threads, ["CPUExecutionProvider"])

    monkeypatch.setattr(cuda_memory, "cupy_module", lambda: recorder)
    monkeypatch.setattr(cuda_memory, "pointer_device", lambda ptr: None)  # all host memory
    monkeypatch.setattr(cuda_backend, "check_available", lambda device, device_id: None)
    monkeypatch.setattr(cuda_backend.CudaBackend, "session", cpu_session)
    return recorder, streams


@pytest.fixture(scope="module")
def compiled() -> cl.CompiledModel:
    return compile_to_memory(conv_net())


def _tensors(runner: cl.Runner, seed: int) -> tuple[cl.NpuTensor, cl.NpuTensor, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)
    y = np.zeros((1, 10), np.float32)
    cma = cl.MemoryType.USER_POINTER_CMA
    t_in = cl.NpuTensor(runner.get_tensors_info(IN)[0], x, cma)
    return t_in, cl.NpuTensor(runner.get_tensors_info(OUT)[0], y, cma), y


def test_each_slot_gets_a_session_on_a_stream_of_its_own(fake_gpu, compiled) -> None:
    recorder, streams = fake_gpu
    with RunnerFactory.from_compiled(compiled, {"device": "cuda"}) as runner, \
            RunnerFactory.from_compiled(compiled) as cpu:  # fmt: skip
        assert runner.get_property("memory") == ("cpu", "cuda:0")
        results = []
        for seed in range(3):  # each pair is replayed on a slot of its own
            t_in, t_out, y = _tensors(runner, seed)
            for _ in range(3):
                assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS
            c_in, c_out, expected = _tensors(cpu, seed)
            assert cpu.execute([[c_in]], [[c_out]]) is cl.StatusCode.SUCCESS
            results.append((y.copy(), expected.copy()))
        jobs = [(_tensors(runner, 10 + i)) for i in range(4)]
        handles = [runner.execute_async([[t_in]], [[t_out]]) for t_in, t_out, _ in jobs[:2]]
        assert all(runner.wait(h, -1) is cl.StatusCode.SUCCESS for h in handles)
        contexts = [slot.contexts[0] for slot in runner._engines.slots_made]
        own = [c.stream for c in contexts]
    for actual, expected in results:
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
    assert len(set(own)) == len(own) >= 3  # no two slots share a stream
    # each session was given its slot's stream (async slots are made concurrently: any order)
    assert sorted(streams[: len(own)]) == sorted(own)
    created = [call for call in recorder.calls if call[0] == "stream"]
    assert all(not non_blocking for _, _, non_blocking in created)  # blocking: legacy order
    synced = {call[1] for call in recorder.calls if call[0] == "sync"}
    assert synced == {c[1] for c in created}  # close() drained every stream it created


def test_a_given_stream_is_the_one_stream_and_session(fake_gpu, compiled) -> None:
    recorder, streams = fake_gpu
    options = {"device": "cuda", "cuda_options": {"stream": 0xBEEF}, "max_concurrent_runs": 3}
    with RunnerFactory.from_compiled(compiled, options) as runner:
        pairs = [_tensors(runner, i) for i in range(3)]
        handles = [runner.execute_async([[a]], [[b]]) for a, b, _ in pairs]
        assert all(runner.wait(h, -1) is cl.StatusCode.SUCCESS for h in handles)
        assert {slot.contexts[0].stream for slot in runner._engines.slots_made} == {0xBEEF}
    assert streams == [0xBEEF]  # one session for every slot
    assert not [call for call in recorder.calls if call[0] in ("stream", "sync")]  # not ours


def test_producer_streams_are_waited_for_with_events_before_every_run(fake_gpu, compiled):
    recorder, _ = fake_gpu
    with RunnerFactory.from_compiled(compiled, {"device": "cuda"}) as runner:
        t_in, t_out, _ = _tensors(runner, 0)
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.SUCCESS
        context = runner._engines.slots_made[0].contexts[0]
        # Its own stream, and the legacy default stream ours blocks on, need no event.
        context.order_after((0x51, context.stream, 1, 0x51))
        for _ in range(2):  # standing until the binding changes: replays wait too
            recorder.calls.clear()
            context.run()
            event = recorder.calls[0][1]
            assert recorder.calls == [
                ("create", event),
                ("record", event, 0x51),
                ("wait", context.stream, event),
                ("destroy", event),
            ]
        context.order_after(())
        recorder.calls.clear()
        context.run()
        assert recorder.calls == []


def test_cuda_graphs_take_device_memory_only(fake_gpu, compiled, caplog) -> None:
    recorder, _ = fake_gpu
    options = {"device": "cuda", "cuda_options": {"cuda_graph": True}}
    with RunnerFactory.from_compiled(compiled, options) as runner:
        assert runner.get_property("memory") == ("cuda:0",)
        t_in, t_out, _ = _tensors(runner, 0)
        assert runner.execute([[t_in]], [[t_out]]) is cl.StatusCode.INVALID_INPUT
        assert "memory on cpu, but this runner binds memory on cuda:0 only" in caplog.text
        slot_streams = [call for call in recorder.calls if call[0] == "stream"]
        assert all(non_blocking for _, _, non_blocking in slot_streams)  # capture-safe
        context = runner._engines.loaded[0].new_context()  # the engine-level refusal, too
        assert context._waits == (1,)  # non-blocking: the legacy default stream, explicitly
        x = np.zeros((1, 3, 16, 16), np.float32)
        with pytest.raises(cl.TensorError, match="cuda_graph binds device memory only"):
            context.bind_input("input", x.ctypes.data, cl.DataType.FLOAT32, x.shape)
        context.close()


def test_warm_up_on_a_cuda_runner(fake_gpu, compiled) -> None:
    """Runner.warm_up creates the slots (a stream each) and never raises on a CUDA runner:
    its first runs are best effort (here the fake CuPy allocates no device memory)."""
    _recorder, streams = fake_gpu
    with RunnerFactory.from_compiled(compiled, {"device": "cuda", "warm_up": True}) as runner:
        assert len(runner._engines.slots_made) >= 3  # max_concurrent_runs + 1
        t_in, t_out, y = _tensors(runner, 7)
        handle = runner.execute_async([[t_in]], [[t_out]])
        assert runner.wait(handle, -1) is cl.StatusCode.SUCCESS and y.any()
    assert len(streams) >= 3
