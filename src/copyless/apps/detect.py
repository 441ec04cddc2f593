"""copyless-detect: zero-copy text detection with the PP-OCRv4 detector at 640x640.

The photo is letterboxed straight into the runner-allocated RGBx input tensor (the HW view of
the detector compiled with its ImageNet normalisation folded in), the probability map is read
in place, and the text boxes are drawn on the photo and saved as a PNG. ``-n`` prints the same
benchmark block as copyless-zerocopy; ``-c`` uses the CPU tensor type instead. With
``--device cuda`` the photo is uploaded once and letterboxed on the GPU into the device input
tensor; the probability map is copied to the host for the box search.
"""

from __future__ import annotations

import argparse

import numpy as np
import numpy.typing as npt

from ..runner import Runner
from ..types import TensorDirection
from ..vision import Box, Letterbox, draw_boxes, letterbox, text_boxes
from ..vision.gpu import DeviceImage, download
from ._models import DETECTOR_SIZE, builtin_detector
from ._setup import image_parser, parse_image_args, run_image_app, tensor_type, timed_runs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = image_parser(
        "copyless-detect",
        "Zero-copy text detection (PP-OCRv4, 640x640).",
        "compiled detector (default: built-in)",
    )
    parser.add_argument("-o", "--output", required=True, help="PNG to write with the boxes")
    parser.add_argument("--threshold", type=float, default=0.3, help="pixel probability cut")
    return parse_image_args(parser, argv)


def main(argv: list[str] | None = None) -> int:
    return run_image_app(parse_args(argv), builtin_detector, _detect)


def _detect(runner: Runner, image: npt.NDArray[np.uint8], args: argparse.Namespace) -> int:
    view = tensor_type(args)
    (in_info,) = runner.get_tensors_info(TensorDirection.INPUT, view)
    (out_info,) = runner.get_tensors_info(TensorDirection.OUTPUT, view)
    x = runner.allocate_npu_tensor(in_info)
    y = runner.allocate_npu_tensor(out_info)

    def preprocess() -> Letterbox:
        return letterbox(image, x, size=DETECTOR_SIZE)

    if x.device_memory is not None:  # --device cuda: the photo goes to the GPU once
        gpu = DeviceImage(image, x.device_memory.device_id)

        def preprocess() -> Letterbox:
            placement = gpu.letterbox(x, size=DETECTOR_SIZE)
            gpu.synchronize()  # timed as preprocessing; the runner needs no host wait
            return placement

    def postprocess(placement: Letterbox) -> list[Box]:
        output = download(y)  # a D2H copy for device memory, else a view
        return text_boxes(output, placement, threshold=args.threshold)

    done = timed_runs(runner, x, y, args.runs, preprocess, postprocess)
    if done is None:
        return 1
    boxes, times = done
    path = draw_boxes(image, boxes, args.output)
    print(f"text boxes: {len(boxes)}")
    for box in boxes[:10]:
        print(f"  box ({box.x0:.0f}, {box.y0:.0f}) - ({box.x1:.0f}, {box.y1:.0f}) {box.score:.2f}")
    print(f"saved {path}")
    for line in times.block():
        print(line)
    return 0
