"""Where tensor memory may live, as the backends declare it: refusals on a CPU runner (real
runners, device memory that is never dereferenced), the plan's device rules and producer
streams, and the runner reading capabilities instead of probing engines."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
from runner_helpers import conv_net

import copyless as cl
from copyless.backends._base import Capabilities, common_memory
from copyless.backends._onnxruntime import CPU_CAPABILITIES, OrtCpuBackend
from copyless.memory._device import DeviceMemory
from copyless.model import compile_to_memory
from copyless.runner import RunnerFactory
from copyless.runner._factory import _check_capabilities
from copyless.runner._plan import BindError, build_plan

IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
CMA = cl.MemoryType.USER_POINTER_CMA


@pytest.fixture(scope="module")
def runner():
    # onnxruntime forced: VAIML's measured choice for the tiny net may be either engine
    # (OpenVINO needs only a 3% lead), and these tests read onnxruntime's entry points
    with RunnerFactory.from_compiled(
        compile_to_memory(conv_net()), None, cl.RunnerType.ONNXRUNTIME
    ) as opened:
        yield opened


BOTH = ("cpu", "cuda:0")


def _device_tensor(info: cl.NpuTensorInfo, device_id: int = 0, **extra) -> cl.NpuTensor:
    memory = DeviceMemory(0x7F00_0000_0000, info.size_in_bytes, device_id, **extra)
    return cl.NpuTensor(info, memory, CMA)


def _allocated(runner: cl.Runner) -> tuple[cl.NpuTensor, cl.NpuTensor]:
    (in_info,), (out_info,) = runner.get_tensors_info(IN), runner.get_tensors_info(OUT)
    return runner.allocate_npu_tensor(in_info), runner.allocate_npu_tensor(out_info)


def test_device_memory_on_a_cpu_runner_is_invalid_naming_tensor_and_devices(runner, caplog):
    x, y = _allocated(runner)
    caplog.set_level(logging.ERROR, "copyless")
    bad_in = _device_tensor(x.info)
    assert runner.execute([[bad_in]], [[y]]) is cl.StatusCode.INVALID_INPUT
    expected = "tensor 'input': memory on cuda:0, but this runner binds memory on cpu only"
    assert expected in caplog.text
    bad_out = _device_tensor(y.info, device_id=1)
    assert runner.execute([[x]], [[bad_out]]) is cl.StatusCode.INVALID_OUTPUT
    assert "tensor 'logits': memory on cuda:1" in caplog.text
    handle = runner.execute_async([[bad_in]], [[y]])
    assert (handle.status, handle.job_id) == (cl.StatusCode.INVALID_INPUT, 0)
    assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS  # it goes on working
    assert runner.get_property("memory") == ("cpu",)


def _specs():
    compiled = compile_to_memory(conv_net(batch=2))
    return compiled.inputs, compiled.outputs


def test_the_plan_binds_device_memory_in_place_and_lists_producer_streams() -> None:
    ins, outs = _specs()
    x = _device_tensor(ins[0].hw, stream=0x51)
    y = _device_tensor(outs[0].hw, device_id=0)
    plan = build_plan(ins, outs, 2, [[x]], [[y]], BOTH)
    assert plan.inputs[0].address == x.address and not plan.staged_inputs
    assert plan.waits == (0x51,)
    host = cl.NpuTensor(ins[0].hw, np.zeros(ins[0].hw.shape, np.float32), CMA)
    assert build_plan(ins, outs, 2, [[host]], [[y]], BOTH).waits == ()
    with pytest.raises(BindError, match="memory on cpu, but this runner binds memory on cuda:0"):
        build_plan(ins, outs, 2, [[host]], [[y]], ("cuda:0",))


def test_device_memory_is_never_converted_or_gathered_on_the_host() -> None:
    ins, outs = _specs()
    y = _device_tensor(outs[0].hw)
    cpu_view = _device_tensor(ins[0].cpu)
    with pytest.raises(BindError, match="converted on the host: use the HW view") as exc:
        build_plan(ins, outs, 2, [[cpu_view]], [[y]], BOTH)
    assert exc.value.status is cl.StatusCode.INVALID_INPUT
    frame = cl.NpuTensorInfo(
        "input", cl.DataType.FLOAT32, IN, cl.TensorType.HW, cl.MemoryLayout.NCHW, (1, 3, 16, 16)
    )
    frames = [[_device_tensor(frame)], [_device_tensor(frame)]]  # same address twice
    half = cl.NpuTensorInfo(
        "logits", cl.DataType.FLOAT32, OUT, cl.TensorType.HW, cl.MemoryLayout.NC, (1, 10)
    )
    out_frames = [[_device_tensor(half)], [_device_tensor(half)]]
    with pytest.raises(BindError, match="not one contiguous batch"):
        build_plan(ins, outs, 2, frames, out_frames, BOTH)


def test_capabilities_are_data_and_the_runner_reads_them() -> None:
    assert OrtCpuBackend.capabilities is CPU_CAPABILITIES
    assert CPU_CAPABILITIES.raw_call and CPU_CAPABILITIES.threads_per_engine
    gpu = Capabilities(memory=("cpu", "cuda:0"), stream=True)
    graphs = Capabilities(memory=("cuda:0",), stream=True, cuda_graphs=True)
    assert common_memory([gpu]) == ("cpu", "cuda:0")
    assert common_memory([gpu, CPU_CAPABILITIES]) == ("cpu",)  # a CPU partition: host only
    assert common_memory([graphs, CPU_CAPABILITIES]) == ()
    with pytest.raises(AttributeError):
        gpu.stream = False  # type: ignore[misc]  # frozen


def test_the_fast_path_calls_the_engine_entry_point_the_backend_declares(runner) -> None:
    x, y = _allocated(runner)
    for _ in range(3):
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
    slot = runner._engines.slots_made[0]
    (target,) = slot.call_targets()
    assert target[0].__name__ == "run_with_iobinding"  # raw_call: onnxruntime's C++ run
    assert runner.get_property("fast_calls") >= 1


def test_a_backend_that_cannot_allocate_outputs_refuses_dynamic_models() -> None:
    model = SimpleNamespace(name="m", outputs=[SimpleNamespace(name="y", dynamic=True)])
    backend = SimpleNamespace(
        name="onnxruntime", device="cuda", capabilities=Capabilities(engine_outputs=False)
    )
    with pytest.raises(cl.UnsupportedError, match=r"outputs \['y'\] have data-dependent"):
        _check_capabilities(model, backend)  # type: ignore[arg-type]
    _check_capabilities(model, OrtCpuBackend())  # type: ignore[arg-type]
