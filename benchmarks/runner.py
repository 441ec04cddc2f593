"""Runner overhead and execution modes, measured side by side in one run.

    python benchmarks/runner.py [--quick]

Prints medians (and ratios) of:
  1. runner.execute vs raw onnxruntime run_with_iobinding (and vs OpenVINO InferRequest.infer
     on the OpenVINO backend) on the same buffers, for a tiny
     model (Relu on 1x3x8x8: pure overhead) and a small conv net, and EfficientNet-Lite0;
  2. CPU-view vs HW-view execute (conversion inside the runner vs zero-copy binding);
  3. async (2 slots) vs sync throughput on EfficientNet-Lite0 and ResNet-50.
Machines are shared and noisy: each figure is a median of interleaved rounds.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runner"))
from runner_helpers import conv_net

import copyless as cl
from copyless.apps.bench.timing import interleaved as interleaved_s
from copyless.apps.bench.timing import relu_model
from copyless.backends import session_options
from copyless.model import CompiledModel, compile_to_memory, zoo

HW, CPU = cl.TensorType.HW, cl.TensorType.CPU
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT


def interleaved(fns: dict[str, Callable[[], object]], n: int, rounds: int) -> dict[str, float]:
    """Median microseconds per call, interleaved (see copyless.apps.bench.timing.interleaved)."""
    return {k: v * 1e6 for k, v in interleaved_s(fns, n, rounds, warm=False).items()}


def overhead(name: str, model: onnx.ModelProto, n: int, rounds: int, threads: int) -> None:
    compiled = compile_to_memory(model)
    runner = cl.RunnerFactory.from_compiled(compiled, {"num_threads": threads})
    x = runner.allocate_npu_tensor(runner.get_tensors_info(IN, HW)[0])
    y = runner.allocate_npu_tensor(runner.get_tensors_info(OUT, HW)[0])
    x.numpy()[...] = np.random.default_rng(0).standard_normal(x.info.shape)
    session = ort.InferenceSession(
        compiled.partitions[0].onnx_bytes, session_options(threads), ["CPUExecutionProvider"]
    )
    binding = session.io_binding()
    xi, yi = compiled.inputs[0].hw, compiled.outputs[0].hw
    binding.bind_input(xi.name, "cpu", 0, np.float32, list(xi.shape), x.address)
    binding.bind_output(yi.name, "cpu", 0, np.float32, list(yi.shape), y.address)
    raw_sess, raw_bind = session._sess, binding._iobinding
    inputs, outputs = [[x]], [[y]]
    fns = {
        "ort run_with_iobinding": lambda: session.run_with_iobinding(binding),
        "ort C++ call (no wrapper)": lambda: raw_sess.run_with_iobinding(raw_bind, None),
        "copyless execute": lambda: runner.execute(inputs, outputs),
    }
    res = interleaved(fns, n, rounds)
    base = res["ort run_with_iobinding"]
    print(f"\n[{name}] median per call ({threads} engine thread(s))")
    for key, value in res.items():
        print(f"  {key:<28}{value:10.2f} us   {value / base:5.2f}x")
    runner.close()
    openvino_overhead(compiled, n, rounds, threads)


def openvino_overhead(compiled: CompiledModel, n: int, rounds: int, threads: int) -> None:
    """The same on OpenVINO: copyless execute vs the InferRequest it drives, same buffers."""
    import openvino as ov

    options = {"num_threads": threads}
    runner = cl.RunnerFactory.from_compiled(compiled, options, cl.RunnerType.OPENVINO)
    x = runner.allocate_npu_tensor(runner.get_tensors_info(IN, HW)[0])
    y = runner.allocate_npu_tensor(runner.get_tensors_info(OUT, HW)[0])
    core = ov.Core()
    request = core.compile_model(
        core.read_model(compiled.partitions[0].onnx_bytes, b""),
        "CPU",
        {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"},
    ).create_infer_request()
    request.set_input_tensor(ov.Tensor(x.numpy(), shared_memory=True))
    request.set_output_tensor(ov.Tensor(y.numpy(), shared_memory=True))
    inputs, outputs = [[x]], [[y]]
    fns = {
        "openvino request.infer": lambda: request.infer(share_outputs=True),
        "copyless execute (openvino)": lambda: runner.execute(inputs, outputs),
    }
    res = interleaved(fns, n, rounds)
    base = res["openvino request.infer"]
    for key, value in res.items():
        print(f"  {key:<28}{value:10.2f} us   {value / base:5.2f}x")
    runner.close()


def views(model: onnx.ModelProto, n: int, rounds: int) -> None:
    compiled = compile_to_memory(model, input_format="rgbx", mean=(127.0,) * 3, std=(128.0,) * 3)
    runner = cl.RunnerFactory.from_compiled(compiled)
    tensors = {
        view: (
            runner.allocate_npu_tensor(runner.get_tensors_info(IN, view)[0]),
            runner.allocate_npu_tensor(runner.get_tensors_info(OUT, view)[0]),
        )
        for view in (HW, CPU)
    }
    fns = {
        f"{view.name} view execute": (
            lambda v=view: runner.execute([[tensors[v][0]]], [[tensors[v][1]]])
        )
        for view in (HW, CPU)
    }
    res = interleaved(fns, n, rounds)
    hw, cpu = res["HW view execute"], res["CPU view execute"]
    print(
        "\n[EfficientNet-Lite0, RGBx-compiled] CPU view (converted inside) vs HW view (zero-copy)"
    )
    print(f"  HW view execute    {hw:10.1f} us")
    print(f"  CPU view execute   {cpu:10.1f} us   {cpu / hw:5.2f}x of HW")
    runner.close()


def async_vs_sync(name: str, path: Path, jobs: int) -> None:
    compiled = compile_to_memory(onnx.load(str(path)))
    sync_runner = cl.RunnerFactory.from_compiled(compiled)
    slots = [
        (
            sync_runner.allocate_npu_tensor(sync_runner.get_tensors_info(IN, HW)[0]),
            sync_runner.allocate_npu_tensor(sync_runner.get_tensors_info(OUT, HW)[0]),
        )
        for _ in range(2)
    ]
    sync_runner.execute([[slots[0][0]]], [[slots[0][1]]])
    t = time.perf_counter()
    for _ in range(jobs):
        sync_runner.execute([[slots[0][0]]], [[slots[0][1]]])
    sync_s = time.perf_counter() - t
    sync_runner.close()
    for threads in (0, 1):
        runner = cl.RunnerFactory.from_compiled(
            compiled, {"max_concurrent_runs": 2, "num_threads": threads}
        )
        # warm-up: the first execute_async loads the async engines (auto threads)
        runner.wait(runner.execute_async([[slots[0][0]]], [[slots[0][1]]]), -1)
        t = time.perf_counter()
        pending = []
        for i in range(jobs):
            x, y = slots[i % 2]
            if len(pending) == 2:
                runner.wait(pending.pop(0), -1)
            pending.append(runner.execute_async([[x]], [[y]]))
        for handle in pending:
            runner.wait(handle, -1)
        async_s = time.perf_counter() - t
        runner.close()
        tag = "auto threads" if threads == 0 else "1 thread/slot"
        print(
            f"\n[{name}] {jobs} frames: sync {jobs / sync_s:7.1f} FPS, async 2 slots ({tag}) "
            f"{jobs / async_s:7.1f} FPS, ratio {sync_s / async_s:4.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    n, rounds, jobs = (200, 3, 20) if args.quick else (2000, 7, 60)
    overhead("tiny: Relu 1x3x8x8", relu_model(), n, rounds, 1)
    overhead("small conv net 1x3x64x64", conv_net(size=64), n, rounds, 1)
    lite0 = zoo.build("efficientnet-lite0", progress=False)
    overhead("EfficientNet-Lite0", onnx.load(str(lite0)), max(20, n // 20), rounds, 2)
    views(onnx.load(str(lite0)), max(20, n // 20), rounds)
    async_vs_sync("EfficientNet-Lite0", lite0, jobs)
    async_vs_sync("ResNet-50", zoo.build("resnet50", progress=False), max(8, jobs // 5))


if __name__ == "__main__":
    main()
