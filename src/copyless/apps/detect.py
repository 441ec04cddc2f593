"""copyless-detect: zero-copy text detection with the PP-OCRv4 detector at 640x640.

The photo is letterboxed straight into the runner-allocated RGBx input tensor (the HW view of
the detector compiled with its ImageNet normalisation folded in), the probability map is read
in place, and the text boxes are drawn on the photo and saved as a PNG. ``-n`` prints the same
benchmark block as copyless-zerocopy; ``-c`` uses the CPU tensor type instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..runner import Runner, RunnerFactory
from ..types import CopylessError, RunnerType, StatusCode, TensorDirection, TensorType
from ..vision import Box, decode, draw_boxes, letterbox, text_boxes
from ._bench import StageTimes, now
from ._models import DETECTOR_SIZE, builtin_detector

EXIT_USAGE = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="copyless-detect", description="Zero-copy text detection (PP-OCRv4, 640x640)."
    )
    parser.add_argument("-i", "--image", required=True, help="input image (JPEG or PNG)")
    parser.add_argument("-o", "--output", required=True, help="PNG to write with the boxes")
    parser.add_argument("-m", "--model-dir", help="compiled detector (default: built-in)")
    parser.add_argument("-c", "--non-zero-copy", action="store_true", help="CPU tensor type")
    parser.add_argument("-n", "--runs", type=int, default=1, help="timed iterations (default 1)")
    parser.add_argument(
        "--runner", choices=["onnxruntime", "openvino"], default="onnxruntime", help="engine"
    )
    parser.add_argument("--threshold", type=float, default=0.3, help="pixel probability cut")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not Path(args.image).is_file():
        print(f"error: no image at {args.image}", file=sys.stderr)
        return EXIT_USAGE
    if args.model_dir is not None and not Path(args.model_dir).exists():
        print(f"error: no model at {args.model_dir}", file=sys.stderr)
        return EXIT_USAGE
    view = "CPU" if args.non_zero_copy else "HW"
    options = {"input_tensor_type": view, "output_tensor_type": view}
    runner_type = RunnerType.OPENVINO if args.runner == "openvino" else RunnerType.ONNXRUNTIME
    try:
        image = decode(args.image)
        model = Path(args.model_dir) if args.model_dir else builtin_detector()
        with RunnerFactory.create_runner(model, options, runner_type) as runner:
            return _detect(runner, image, args)
    except (CopylessError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _detect(runner: Runner, image: Any, args: argparse.Namespace) -> int:
    view = TensorType.CPU if args.non_zero_copy else TensorType.HW
    (in_info,) = runner.get_tensors_info(TensorDirection.INPUT, view)
    (out_info,) = runner.get_tensors_info(TensorDirection.OUTPUT, view)
    x = runner.allocate_npu_tensor(in_info)
    y = runner.allocate_npu_tensor(out_info)
    times = StageTimes()
    boxes: list[Box] = []
    for run in range(args.runs + 1):  # one untimed warm-up
        t0 = now()
        placement = letterbox(image, x, size=DETECTOR_SIZE)
        t1 = now()
        status = runner.execute([[x]], [[y]])
        t2 = now()
        if status is not StatusCode.SUCCESS:
            print(f"error: execute returned {status.name}", file=sys.stderr)
            return 1
        boxes = text_boxes(y, placement, threshold=args.threshold)
        t3 = now()
        if run:
            times.preprocess.append(t1 - t0)
            times.infer.append(t2 - t1)
            times.postprocess.append(t3 - t2)
    path = draw_boxes(image, boxes, args.output)
    print(f"text boxes: {len(boxes)}")
    for box in boxes[:10]:
        print(f"  box ({box.x0:.0f}, {box.y0:.0f}) - ({box.x1:.0f}, {box.y1:.0f}) {box.score:.2f}")
    print(f"saved {path}")
    for line in times.block():
        print(line)
    return 0
