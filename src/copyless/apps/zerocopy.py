"""copyless-zerocopy: zero-copy inference on one image, after VART-ML's vart_zerocopy sample.

Zero-copy (default): the runner takes the HW tensor type. Preprocess writes packed RGBx uint8
straight into a runner-allocated input tensor; the runner binds that memory and the output
tensor to the engine in place; postprocess reads the output in place.
Non-zero-copy (-c): the runner takes the CPU tensor type. Preprocess writes planar float
(RGBP_FLOAT, pixel units) and the runner converts it to the HW view inside ``execute``.
Decoding the JPEG is not part of either (done once, as in the sample): at the smallest
libjpeg-turbo DCT scale that still covers the model's resize, so the timed preprocess reads
fewer pixels from a large photo.

On the GPU (--device cuda): the runner allocates the HW tensors in device memory; the decoded
image is uploaded once and resized, cropped (or letterboxed) and packed on the GPU straight
into the input tensor (copyless.vision._gpu); postprocess copies the output to the host.

The photo is prepared as the compiled model recorded (``copyless-compile --mean --std
--resize --colour-order``; see copyless.model._preprocessing): a classifier's crop, a
detector's letterbox, RGB or BGR, normalised in the graph or here. A model compiled without
that record gets a warning naming what is assumed. A ``[N, classes]`` output prints the top
labels (named by :func:`copyless.model.class_names`: ``--labels FILE`` for your own model, else
what the model records, else the built-in model's own; ``class N`` when nothing names them);
a ``[N, 1, H, W]`` probability map (PP-OCRv4, ``--model ppocr-det``) its text boxes.

One image, one synchronous round at a time (the sample's figures), so no Pipeline: SIGINT /
SIGTERM end the timed rounds after the one running, the rounds done are reported, then one
``stopped by`` line and exit 130 / 143 (see :mod:`._setup`).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..model import class_names, zoo
from ..runner import Runner
from ..types import TensorDirection
from ..vision import Box, Preparer, download, preparer_for, softmax_topk, text_boxes
from ._checks import model_task, task_mismatch
from ._models import builtin_model
from ._output import Output, box_fields
from ._prepare import warning
from ._setup import (
    EXIT_USAGE,
    builtin_name,
    image_parser,
    parse_image_args,
    report_timing,
    run_image_app,
    tensor_type,
    timed_runs,
)

#: The zoo models ``--model`` compiles (cached) when no ``-m`` is given.
MODELS = ("efficientnet-lite0", "resnet50", "ppocr-det")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = image_parser(
        "copyless-zerocopy",
        "Zero-copy inference on one image (classification or text detection).",
        "a compiled classifier or text detector (.rai or directory) or a built-in name "
        f"({', '.join(MODELS)}); default: the built-in --model",
    )
    parser.add_argument("--model", choices=MODELS, default=MODELS[0],
                        help="built-in zoo model, compiled RGBx on first use (default "
                        "efficientnet-lite0); ignored with -m")  # fmt: skip
    parser.add_argument("-k", "--top", type=int, default=5, help="labels to print (default 5)")
    args = parse_image_args(parser, argv)
    builtin_name(args, MODELS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    builtin = functools.partial(builtin_model, args.model)
    return run_image_app(args, builtin, _infer)


def _infer(runner: Runner, image: npt.NDArray[np.uint8], args: argparse.Namespace) -> int:
    view = tensor_type(args)
    refusal = task_mismatch(args.model_dir or args.model, model_task(runner.model),
                            ("classifier", "text"))  # fmt: skip
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return EXIT_USAGE
    in_infos = runner.get_tensors_info(TensorDirection.INPUT, view)
    out_infos = runner.get_tensors_info(TensorDirection.OUTPUT, view)
    if len(in_infos) != 1 or len(out_infos) != 1 or runner.get_batch_size() != 1:
        print("error: the sample supports one input, one output, batch 1", file=sys.stderr)
        return EXIT_USAGE
    in_info, out_info = in_infos[0], out_infos[0]
    prepare = preparer_for(runner, in_info)
    written = prepare.colour.image_bytes(prepare.height, prepare.width)
    if written != in_info.size_in_bytes:  # the sample's runtime byte-size check
        print(
            f"error: preprocess writes {written} bytes, the runner's input tensor holds "
            f"{in_info.size_in_bytes}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if prepare.assumed:
        print(warning(args.model_dir or runner.model.name, prepare.assumed, prepare.policy),
              file=sys.stderr)
    names = class_names(runner.model, args.labels)  # a bad --labels FILE: before any run
    if args.model_dir is None and not zoo.entry(args.model).trained:
        print(f"note: the built-in {args.model} has deterministic random weights (a timing "
              "model): its labels mean nothing", file=sys.stderr)  # fmt: skip
    full = (image.shape[0], image.shape[1])
    image = _smaller(prepare, Path(args.image), image)
    x = runner.allocate_npu_tensor(in_info)
    y = runner.allocate_npu_tensor(out_info)
    preprocess = prepare.writer(image, x, full)
    out = Output.from_args(args)
    if _is_map(out_info.shape):  # a text detector's probability map
        boxes = timed_runs(runner, x, y, args.runs, preprocess,
                           lambda placed: text_boxes(download(y), placed),
                           args.interruption)  # fmt: skip
        if boxes is None:
            return 1
        _print_boxes(out, boxes[0])
        times = boxes[1]
        found = {"boxes": len(boxes[0])}
    else:
        quant = runner.get_quant_parameters(out_info.name)
        top = timed_runs(runner, x, y, args.runs, preprocess,
                         lambda _placed: softmax_topk(download(y), args.top, quant),
                         args.interruption)  # fmt: skip
        if top is None:
            return 1
        _print_top(out, top[0], names)
        times = top[1]
        found = {"labels": len(top[0])}
    report_timing(out, times)
    out.summary(image=args.image, model=args.model_dir or args.model,
                engine=str(runner.get_property("engine")), **found)  # fmt: skip
    return 0


def _smaller(prepare: Preparer, path: Path, image: npt.NDArray[np.uint8]) -> Any:
    """The photo decoded again at a reduced DCT scale when it is at least twice what the
    resize needs (decoding is outside the timed loop; the fused resize then reads less)."""
    need_h, need_w = prepare.min_decode_size()
    if image.shape[0] >= 2 * need_h and image.shape[1] >= 2 * need_w:
        return prepare.decode(path)
    return image


def _is_map(shape: tuple[int, ...]) -> bool:
    return len(shape) == 4 and shape[1] == 1 and shape[2] > 1


def _print_boxes(out: Output, boxes: list[Box]) -> None:
    """The first ten boxes as lines; every box as JSON."""
    out.say(f"text boxes: {len(boxes)}")
    for box in boxes[:10]:
        corners = f"({box.x0:.0f}, {box.y0:.0f}) - ({box.x1:.0f}, {box.y1:.0f})"
        out.say(f"  box {corners} {box.score:.2f}")
    for box in boxes:
        out.record("box", **box_fields(box))


def _print_top(out: Output, top: list[tuple[int, float]], names: list[str]) -> None:
    for rank, (class_id, score) in enumerate(top, start=1):
        label = names[class_id] if class_id < len(names) else f"class {class_id}"
        out.say(f"top-{rank}: {class_id} {label} {score:.3f}")
        out.record("label", rank=rank, class_id=class_id, label=label, score=round(score, 4))
