"""copyless-zerocopy: zero-copy image classification, after VART-ML's vart_zerocopy sample.

Zero-copy (default): the runner takes the HW tensor type. Preprocess writes packed RGBx uint8
straight into a runner-allocated input tensor; the runner binds that memory and the output
tensor to the engine in place; postprocess reads the output in place.
Non-zero-copy (-c): the runner takes the CPU tensor type. Preprocess writes planar float
(RGBP_FLOAT, pixel units) and the runner converts it to the HW view inside ``execute``.
Decoding the JPEG is not part of either (done once, as in the sample).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..model import zoo
from ..runner import Runner, RunnerFactory
from ..types import CopylessError, MemoryLayout, RunnerType, StatusCode, TensorDirection, TensorType
from ..vision import classify_preprocess, colour_format_for, decode, softmax_topk
from ._bench import StageTimes, now
from ._models import builtin_classifier

EXIT_USAGE = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="copyless-zerocopy", description="Zero-copy classification of one image."
    )
    parser.add_argument("-i", "--image", required=True, help="input image (JPEG or PNG)")
    parser.add_argument(
        "-m", "--model-dir", help="compiled model (default: built-in EfficientNet-Lite0, RGBx)"
    )
    parser.add_argument(
        "-c", "--non-zero-copy", action="store_true", help="CPU tensor type (runner converts)"
    )
    parser.add_argument("-n", "--runs", type=int, default=1, help="timed iterations (default 1)")
    parser.add_argument(
        "--runner", choices=["onnxruntime", "openvino"], default="onnxruntime", help="engine"
    )
    parser.add_argument("-k", "--top", type=int, default=5, help="labels to print (default 5)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    image_path = Path(args.image)
    if not image_path.is_file():
        print(f"error: no image at {image_path}", file=sys.stderr)
        return EXIT_USAGE
    if args.model_dir is not None and not Path(args.model_dir).exists():
        print(f"error: no model at {args.model_dir}", file=sys.stderr)
        return EXIT_USAGE
    view = "CPU" if args.non_zero_copy else "HW"
    options = {"input_tensor_type": view, "output_tensor_type": view}
    runner_type = RunnerType.OPENVINO if args.runner == "openvino" else RunnerType.ONNXRUNTIME
    try:
        image = decode(image_path)
        model = Path(args.model_dir) if args.model_dir else builtin_classifier()
        with RunnerFactory.create_runner(model, options, runner_type) as runner:
            return _classify(runner, image, args)
    except (CopylessError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _classify(runner: Runner, image: Any, args: argparse.Namespace) -> int:
    view = TensorType.CPU if args.non_zero_copy else TensorType.HW
    in_infos = runner.get_tensors_info(TensorDirection.INPUT, view)
    out_infos = runner.get_tensors_info(TensorDirection.OUTPUT, view)
    if len(in_infos) != 1 or len(out_infos) != 1 or runner.get_batch_size() != 1:
        print("error: the sample supports one input, one output, batch 1", file=sys.stderr)
        return EXIT_USAGE
    in_info, out_info = in_infos[0], out_infos[0]
    fmt = colour_format_for(in_info)
    packed = fmt.memory_layout is MemoryLayout.NHWC4
    size = in_info.shape[1] if packed else in_info.shape[2]
    written = fmt.data_type.itemsize * (4 if packed else 3) * size * size
    if written != in_info.size_in_bytes:  # the sample's runtime byte-size check
        print(
            f"error: preprocess writes {written} bytes, the runner's input tensor holds "
            f"{in_info.size_in_bytes}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    x = runner.allocate_npu_tensor(in_info)
    y = runner.allocate_npu_tensor(out_info)
    quant = runner.get_quant_parameters(out_info.name)
    times = StageTimes()
    top: list[tuple[int, float]] = []
    for run in range(args.runs + 1):  # one untimed warm-up
        t0 = now()
        classify_preprocess(image, x, resize_short=round(size * 256 / 224), crop=size)
        t1 = now()
        status = runner.execute([[x]], [[y]])
        t2 = now()
        if status is not StatusCode.SUCCESS:
            print(f"error: execute returned {status.name}", file=sys.stderr)
            return 1
        top = softmax_topk(y, args.top, quant)
        t3 = now()
        if run:
            times.preprocess.append(t1 - t0)
            times.infer.append(t2 - t1)
            times.postprocess.append(t3 - t2)
    _print_top(top)
    for line in times.block():
        print(line)
    return 0


def _print_top(top: list[tuple[int, float]]) -> None:
    try:
        names = zoo.labels()
    except CopylessError:
        names = []
    for rank, (class_id, score) in enumerate(top, start=1):
        label = names[class_id] if class_id < len(names) else f"class {class_id}"
        print(f"top-{rank}: {class_id} {label} {score:.3f}")
