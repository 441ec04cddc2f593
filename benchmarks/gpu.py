"""GPU inference: the regular API vs the zero-copy device API vs raw ONNX Runtime IOBinding.

For each model (EfficientNet-Lite0 batch 1 and 32, ResNet-50 batch 1, the PP-OCRv4 text
detector at 640x640 batch 1) this times, on one ``DeviceSession``:

* ``regular``: ``run_inference(host_in, host_out)`` (H2D + compute + D2H, one call);
* per stage of the device API: ``copy_input_to_gpu`` (H2D), ``run_inference_device`` on the
  session's buffers (compute only: the zero-copy path), ``copy_output_to_cpu`` (D2H);
* ``raw ort``: a plain ``onnxruntime.InferenceSession`` on the CUDA provider running
  ``run_with_iobinding`` on ``OrtValue`` device buffers bound once (the floor: no copyless
  code in the loop).

Medians over ``--repeats`` runs after ``--warmup`` runs, and the ratios regular / device and
device / raw ort. Without a CUDA provider and device it says so and exits with status 0.

    .venv/bin/python benchmarks/gpu.py [--repeats 50] [--warmup 10] [--device cuda|tensorrt]
    .venv/bin/python benchmarks/gpu.py --models efficientnet-lite0:1 ppocr-det:1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort

from copyless.backends import _cuda_driver
from copyless.model import compile_to_memory, zoo
from copyless.runner.device_api import DeviceSession
from copyless.types import CopylessError

DEFAULT_MODELS = ["efficientnet-lite0:1", "efficientnet-lite0:32", "resnet50:1", "ppocr-det:1"]


def cuda_missing() -> str | None:
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        version = ort.__version__
        return f"onnxruntime {version} has no CUDAExecutionProvider (pip install copyless[cuda])"
    try:
        count = _cuda_driver.driver().device_count
    except CopylessError as exc:
        return str(exc)
    return None if count else "no CUDA device"


def median_ms(fn: Callable[[], Any], repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def raw_ort(graph: bytes, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> Any:
    """A plain CUDA session with OrtValue device buffers bound once; returns its run."""
    session = ort.InferenceSession(graph, providers=["CUDAExecutionProvider"])
    binding = session.io_binding()
    keep = []
    for name, array in feeds.items():
        value = ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0)
        binding.bind_ortvalue_input(name, value)
        keep.append(value)
    for name, array in outputs.items():
        value = ort.OrtValue.ortvalue_from_shape_and_type(array.shape, array.dtype, "cuda", 0)
        binding.bind_ortvalue_output(name, value)
        keep.append(value)

    def run() -> None:
        session.run_with_iobinding(binding)  # synchronizes the stream at the end

    run.keep = (session, binding, keep)  # type: ignore[attr-defined]
    return run


def bench(name: str, batch: int, args: argparse.Namespace) -> dict[str, float]:
    options: dict[str, Any] = {"batch_size": batch}
    if name == "ppocr-det":
        options["input_shapes"] = {"x": (batch, 3, 640, 640)}
    compiled = compile_to_memory(zoo.build(name, progress=False), **options)
    r, w = args.repeats, args.warmup
    with DeviceSession(compiled, device=args.device) as session:
        rng = np.random.default_rng(0)
        host_in = [rng.standard_normal(i.shape).astype(i.numpy_dtype) for i in session.input_infos]
        host_out = [np.zeros(i.shape, i.numpy_dtype) for i in session.output_infos]
        result = {
            "regular": median_ms(lambda: session.run_inference(host_in, host_out), r, w),
            "h2d": median_ms(lambda: session.copy_input_to_gpu(host_in), r, w),
            "compute": median_ms(session.run_inference_device, r, w),
            "d2h": median_ms(lambda: session.copy_output_to_cpu(host_out), r, w),
        }
        check = host_out[0].copy()
        session.run_inference(host_in, host_out)
        result["max_abs_diff"] = float(np.max(np.abs(check - host_out[0])))
    # The same compiled graph, fed the same arrays, with no copyless code in the loop.
    feeds = {i.name: a for i, a in zip(session.input_infos, host_in, strict=True)}
    outs = {i.name: a for i, a in zip(session.output_infos, host_out, strict=True)}
    result["raw_ort"] = median_ms(raw_ort(compiled.partitions[0].onnx_bytes, feeds, outs), r, w)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--device", choices=["cuda", "tensorrt"], default="cuda")
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="NAME:BATCH ...")
    args = parser.parse_args(argv)
    reason = cuda_missing()
    if reason is not None:
        print(f"gpu benchmark skipped: no usable GPU here: {reason}")
        return 0
    print(f"onnxruntime {ort.__version__}, device {args.device}, repeats {args.repeats}")
    header = f"{'model':<24}{'regular':>10}{'h2d':>9}{'compute':>9}{'d2h':>9}{'raw ort':>9}"
    print(header + f"{'reg/dev':>9}{'dev/raw':>9}   (ms, medians)")
    for spec in args.models:
        name, _, batch = spec.partition(":")
        res = bench(name, int(batch or 1), args)
        raw = res["raw_ort"]
        print(
            f"{spec:<24}{res['regular']:>10.3f}{res['h2d']:>9.3f}{res['compute']:>9.3f}"
            f"{res['d2h']:>9.3f}{raw:>9.3f}{res['regular'] / res['compute']:>8.2f}x"
            f"{res['compute'] / raw:>8.2f}x"
        )
        if res["max_abs_diff"] > 1e-3:  # the staged and one-call paths must agree
            print(f"  warning: regular vs staged outputs differ by {res['max_abs_diff']:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
