"""copyless-zerocopy: zero-copy image classification, after VART-ML's vart_zerocopy sample.

Zero-copy (default): the runner takes the HW tensor type. Preprocess writes packed RGBx uint8
straight into a runner-allocated input tensor; the runner binds that memory and the output
tensor to the engine in place; postprocess reads the output in place.
Non-zero-copy (-c): the runner takes the CPU tensor type. Preprocess writes planar float
(RGBP_FLOAT, pixel units) and the runner converts it to the HW view inside ``execute``.
Decoding the JPEG is not part of either (done once, as in the sample).
On the GPU (--device cuda): the runner allocates the HW tensors in device memory; the decoded
image is uploaded once and resized, cropped and packed on the GPU straight into the input
tensor (copyless.vision.gpu); postprocess copies the 1000 scores to the host.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import numpy.typing as npt

from ..model import zoo
from ..runner import Runner
from ..types import CopylessError, MemoryLayout, TensorDirection
from ..vision import classify_preprocess, colour_format_for, softmax_topk
from ..vision.gpu import DeviceImage, download
from ._models import builtin_classifier
from ._setup import (
    EXIT_USAGE,
    image_parser,
    parse_image_args,
    run_image_app,
    tensor_type,
    timed_runs,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = image_parser(
        "copyless-zerocopy",
        "Zero-copy classification of one image.",
        "compiled model (default: built-in EfficientNet-Lite0, RGBx)",
    )
    parser.add_argument("-k", "--top", type=int, default=5, help="labels to print (default 5)")
    return parse_image_args(parser, argv)


def main(argv: list[str] | None = None) -> int:
    return run_image_app(parse_args(argv), builtin_classifier, _classify)


def _classify(runner: Runner, image: npt.NDArray[np.uint8], args: argparse.Namespace) -> int:
    view = tensor_type(args)
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
    short = round(size * 256 / 224)

    def preprocess() -> None:
        classify_preprocess(image, x, resize_short=short, crop=size)

    if x.device_memory is not None:  # --device cuda: the image goes to the GPU once
        gpu = DeviceImage(image, x.device_memory.device_id)

        def preprocess() -> None:
            gpu.classify(x, resize_short=short, crop=size)
            gpu.synchronize()  # timed as preprocessing; the runner needs no host wait

    def postprocess(_: None) -> list[tuple[int, float]]:
        output = download(y)  # a D2H copy for device memory, else a view
        return softmax_topk(output, args.top, quant)

    done = timed_runs(runner, x, y, args.runs, preprocess, postprocess)
    if done is None:
        return 1
    top, times = done
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
