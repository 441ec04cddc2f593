"""GPU inference, measured side by side in one run (interleaved rounds, medians, ratios).

    python benchmarks/gpu.py [--quick] [--json OUT.json]        # on an NVIDIA GPU
    python benchmarks/gpu.py --device cpu --quick                # the same code paths on CPU

1. 640x640, batch 1 (PP-OCRv4 det; ``yolo-640``: a YOLOv5s-size detector built with
   onnx.helper, random weights, 3 heads [1,255,80|40|20,...]): the regular API
   (``DeviceSession.run_inference``: host numpy in and out every call) vs the device-pointer
   API (``run_inference_device``: data stays on the GPU), each without and with CUDA graphs
   (graphs take device memory only: device-pointer row). Seed 003 reports 1.27x.
2. EfficientNet-Lite0 batch 1: copyless regular vs plain onnxruntime-gpu ``session.run``
   (numpy), and copyless device-pointer vs raw ``run_with_iobinding`` on device OrtValues
   bound once (the floor: copyless's overhead per call; goal <= 1.1x).
3. Async vs sync throughput (host tensors: upload, compute and download of successive
   frames overlap on streams of their own), Lite0 batch 8 and PP-OCR det, 2 to 4 slots.

Without a usable GPU it prints why and exits 0 (``--device cpu`` runs the same code paths
on the CPU, to check the script itself).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import onnxruntime as ort

import copyless as cl
from copyless.apps.bench.timing import interleaved
from copyless.backends import check_available
from copyless.model import CompiledModel, compile_to_memory, zoo

IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
PROVIDERS = {"cuda": ["CUDAExecutionProvider"], "cpu": ["CPUExecutionProvider"]}


# -- models -----------------------------------------------------------------------------
def yolo_640() -> onnx.ModelProto:
    """A YOLOv5s-size detector (Conv+SiLU backbone to stride 32, 1x1 heads at strides
    8/16/32, 255 channels each): about YOLOv5s's compute and output bytes, random weights."""
    rng = np.random.default_rng(0)
    nodes: list[onnx.NodeProto] = []
    weights: list[onnx.TensorProto] = []

    def conv(x: str, cin: int, cout: int, k: int, stride: int, act: bool = True) -> str:
        name = f"c{len(weights)}"
        scale = np.sqrt(2.0 / (cin * k * k))
        w = (rng.standard_normal((cout, cin, k, k)) * scale).astype(np.float32)
        weights.append(onh.from_array(w, f"{name}_w"))
        weights.append(onh.from_array(np.zeros(cout, np.float32), f"{name}_b"))
        pads = [k // 2] * 4
        inputs = [x, f"{name}_w", f"{name}_b"]
        nodes.append(oh.make_node("Conv", inputs, [name], strides=[stride] * 2, pads=pads))
        if not act:
            return name
        nodes.append(oh.make_node("Sigmoid", [name], [f"{name}_s"]))
        nodes.append(oh.make_node("Mul", [name, f"{name}_s"], [f"{name}_a"]))
        return f"{name}_a"

    x, cin, heads = "images", 3, []
    for cout, repeats in ((32, 0), (64, 1), (128, 2), (256, 3), (512, 1)):
        x = conv(x, cin, cout, 3, 2)
        for _ in range(repeats):
            x = conv(conv(x, cout, cout, 1, 1), cout, cout, 3, 1)
        cin = cout
        if cout >= 128:
            heads.append(conv(x, cout, 255, 1, 1, act=False))
    outputs = [oh.make_tensor_value_info(h, onnx.TensorProto.FLOAT, None) for h in heads]
    graph = oh.make_graph(
        nodes, "yolo_640",
        [oh.make_tensor_value_info("images", onnx.TensorProto.FLOAT, [1, 3, 640, 640])],
        outputs, weights,
    )  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def load(name: str, onnx_dir: Path | None) -> CompiledModel:
    """A benchmark model compiled at batch 1 (``name:batch`` for another batch)."""
    base, _, batch = name.partition(":")
    size = int(batch or 1)
    if base == "yolo-640":
        return compile_to_memory(yolo_640())
    source = onnx_dir / f"{base}.onnx" if onnx_dir else None
    path = source if source is not None and source.is_file() else zoo.build(base, progress=False)
    options: dict[str, Any] = {"batch_size": size}
    if base == "ppocr-det":
        options["input_shapes"] = {"x": (size, 3, 640, 640)}
    return compile_to_memory(path, **options)


# -- contenders -------------------------------------------------------------------------
def host_arrays(infos: tuple[cl.NpuTensorInfo, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(i.shape).astype(i.numpy_dtype) for i in infos]


Call = Callable[[], object]


def plain_ort(compiled: CompiledModel, device: str) -> tuple[Call, Call]:
    """``session.run`` on numpy, and ``run_with_iobinding`` on OrtValues bound once (on the
    device for cuda): what a user writes without copyless."""
    session = ort.InferenceSession(
        bytes(compiled.partitions[0].onnx_bytes), providers=PROVIDERS[device]
    )
    infos = tuple(spec.hw for spec in compiled.inputs)
    feeds = {i.name: a for i, a in zip(infos, host_arrays(infos), strict=True)}
    binding = session.io_binding()
    keep = []
    for name, array in feeds.items():
        value = ort.OrtValue.ortvalue_from_numpy(array, device, 0)
        binding.bind_ortvalue_input(name, value)
        keep.append(value)
    for spec in compiled.outputs:
        shape, dtype = spec.hw.shape, spec.hw.numpy_dtype
        value = ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, device, 0)
        binding.bind_ortvalue_output(spec.name, value)
        keep.append(value)

    def run() -> object:
        return session.run(None, feeds)

    def iobinding() -> object:
        return session.run_with_iobinding(binding), keep

    return run, iobinding


def session_calls(session: cl.DeviceSession) -> tuple[Call, Call]:
    host_in = host_arrays(session.input_infos)
    host_out = [np.zeros(i.shape, i.numpy_dtype) for i in session.output_infos]
    session.copy_input_to_gpu(host_in)

    def regular() -> object:
        return _ok(session.run_inference(host_in, host_out))

    def device() -> object:
        return _ok(session.run_inference_device())

    return regular, device


def _ok(status: cl.StatusCode) -> cl.StatusCode:
    if status is not cl.StatusCode.SUCCESS:
        raise RuntimeError(f"the benchmark call returned {status.name}")
    return status


# -- sections ---------------------------------------------------------------------------
def section_640(args: argparse.Namespace, results: dict[str, Any]) -> None:
    print("\n640x640 batch 1: regular API vs device-pointer API (ms per call, medians)")
    columns = ("regular", "device", "dev+graphs", "reg/dev", "reg/graphs")
    print(f"{'model':<12}" + "".join(f"{c:>12}" for c in columns))
    for name in ("ppocr-det", "yolo-640"):
        compiled = load(name, args.onnx_dir)
        with cl.DeviceSession(compiled, args.device) as plain:
            regular, device = session_calls(plain)
            fns: dict[str, Callable[[], object]] = {"regular": regular, "device": device}
            graphs = None
            if args.device == "cuda":
                graphs = cl.DeviceSession(compiled, "cuda", cuda_options={"cuda_graph": True})
                fns["graphs"] = session_calls(graphs)[1]
            ms = {k: v * 1e3 for k, v in interleaved(fns, args.reps, args.rounds).items()}
            if graphs is not None:
                graphs.close()
        g = ms.get("graphs", float("nan"))
        figures = (ms["regular"], ms["device"], g)
        ratios = (ms["regular"] / ms["device"], ms["regular"] / g)
        print(f"{name:<12}" + "".join(f"{v:>12.3f}" for v in figures)
              + "".join(f"{r:>11.2f}x" for r in ratios))  # fmt: skip
        results[f"640/{name}"] = ms


def section_lite0(args: argparse.Namespace, results: dict[str, Any]) -> None:
    print("\nEfficientNet-Lite0 batch 1: copyless vs plain onnxruntime (ms per call, medians)")
    compiled = load("efficientnet-lite0", args.onnx_dir)
    run, iobinding = plain_ort(compiled, args.device)
    with cl.DeviceSession(compiled, args.device) as session:
        regular, device = session_calls(session)
        fns = {"copyless regular": regular, "ort session.run": run,
               "copyless device": device, "ort iobinding": iobinding}  # fmt: skip
        ms = {k: v * 1e3 for k, v in interleaved(fns, args.reps, args.rounds).items()}
    for key, value in ms.items():
        print(f"  {key:<20}{value:>9.3f}")
    print(f"  regular / session.run   {ms['copyless regular'] / ms['ort session.run']:.2f}x")
    overhead = ms["copyless device"] / ms["ort iobinding"]
    print(f"  device / iobinding      {overhead:.2f}x  (goal <= 1.1x)")
    results["lite0"] = ms


def section_async(args: argparse.Namespace, results: dict[str, Any]) -> None:
    print("\nAsync vs sync throughput, host tensors (frames/s, medians of rounds)")
    for name in ("efficientnet-lite0:8", "ppocr-det"):
        compiled = load(name, args.onnx_dir)
        row: dict[str, float] = {}
        for slots in (1, 2, 3, 4):
            row[f"{slots}"] = throughput(compiled, args, slots)
        print(f"  {name:<22}" + "".join(f"  {k} slot(s) {v:8.1f}" for k, v in row.items())
              + f"   best async / sync {max(list(row.values())[1:]) / row['1']:.2f}x")  # fmt: skip
        results[f"async/{name}"] = row


def throughput(compiled: CompiledModel, args: argparse.Namespace, slots: int) -> float:
    """Frames per second of ``args.jobs`` jobs kept ``slots`` deep (1: sync ``execute``)."""
    options = {"device": args.device, "max_concurrent_runs": max(1, slots)}
    with cl.RunnerFactory.from_compiled(compiled, options) as runner:
        ins = tuple(runner.get_tensors_info(IN, cl.TensorType.HW))
        outs = runner.get_tensors_info(OUT, cl.TensorType.HW)
        pairs = [
            (host_tensors(ins, host_arrays(ins, seed)),
             host_tensors(outs, [np.zeros(i.shape, i.numpy_dtype) for i in outs]))
            for seed in range(max(1, slots))
        ]  # fmt: skip
        rates = []
        for _ in range(args.rounds + 1):  # the first round warms the slots up
            start = time.perf_counter()
            run_jobs(runner, pairs, args.jobs, slots)
            rates.append(args.jobs * runner.get_batch_size() / (time.perf_counter() - start))
        return statistics.median(rates[1:])


def host_tensors(infos: Any, arrays: list[np.ndarray]) -> list[cl.NpuTensor]:
    return [
        cl.NpuTensor(i, a, cl.MemoryType.USER_POINTER_CMA)
        for i, a in zip(infos, arrays, strict=True)
    ]


def run_jobs(runner: cl.Runner, pairs: list[Any], jobs: int, slots: int) -> None:
    if slots == 1:
        for _ in range(jobs):
            _ok(runner.execute([pairs[0][0]], [pairs[0][1]]))
        return
    pending: list[cl.JobHandle] = []
    for job in range(jobs):
        if len(pending) == slots:
            _ok(runner.wait(pending.pop(0), -1))
        inputs, outputs = pairs[job % slots]
        handle = runner.execute_async([inputs], [outputs])
        _ok(handle.status)
        pending.append(handle)
    for handle in pending:
        _ok(runner.wait(handle, -1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--onnx-dir", type=Path, default=os.environ.get("COPYLESS_GPU_ONNX"),
                        help="prebuilt <name>.onnx files (else the zoo builds them)")  # fmt: skip
    parser.add_argument("--sections", nargs="+", default=["640", "lite0", "async"])
    args = parser.parse_args(argv)
    args.reps, args.rounds, args.jobs = (10, 3, 24) if args.quick else (50, 7, 96)
    if args.device == "cuda":
        try:
            check_available("cuda")
        except cl.CopylessError as exc:
            print(f"gpu benchmark skipped: {exc}")
            return 0
    print(f"onnxruntime {ort.__version__} ({ort.get_device()}), device {args.device}, "
          f"{args.reps} calls x {args.rounds} interleaved rounds")  # fmt: skip
    results: dict[str, Any] = {"device": args.device, "onnxruntime": ort.__version__}
    sections = {"640": section_640, "lite0": section_lite0, "async": section_async}
    for name in args.sections:
        sections[name](args, results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
