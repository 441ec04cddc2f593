"""copyless-detect: zero-copy detection on a photo: text (PP-OCRv4), faces (CenterFace),
document layout (PP-PicoDet), or with ``-m`` any compiled detector or segmenter (a YOLO,
torchvision's SSD / Faster R-CNN / DeepLab / LR-ASPP...: what it does is read from its task
record, :func:`copyless.model.task_of`).

``--model text`` (the default): the photo is letterboxed straight into the runner-allocated
RGBx input tensor of the PP-OCRv4 detector at 640x640 (ImageNet normalisation folded in; a
model given with ``-m`` is prepared as its compiled record says, with a warning for what it
lacks), the probability map is read in place and the DB boxes are computed in Python.

``--model face`` / ``--model layout``: the zoo detector is compiled (once, cached) for RGBx
frames of the photo's own size, or, for a photo larger than the family's limit side
(``--max-side``: 1920 for faces, 1600 for layout), of that size scaled down with the aspect
kept (said on stderr; the boxes still come back in the photo's pixels), with its
postprocess folded into the graph (resize to the model's size, decoding,
NonMaxSuppression, sorting: see ``copyless-compile --postprocess``), so the decoded pixels
are copied once into the input tensor and the outputs are the final boxes, scores and
classes; their count is the outputs' ``produced_shape``.

A ``-m`` detector (task ``detect``) gets the photo as its record says (a YOLO's letterbox,
a stretch to torchvision's input size...), its boxes mapped back to the photo's pixels; a
segmenter (task ``segment``) prints ``mask: CLASS_ID LABEL PIXELS FRACTION`` per class
found (the mask mapped to the photo) and paints them into the ``-o`` image.

Every detection prints as ``box: X0 Y0 X1 Y1 CLASS_ID LABEL SCORE`` (image pixels) and is
drawn with its label into the ``-o`` image (PNG, JPEG... by its extension; checked before
any work). A model given with ``-m`` runs the task its record names: a classifier is
refused, an ONNX file gets the line that compiles it. ``-n`` prints the same benchmark block
as copyless-zerocopy; ``-c`` uses the CPU tensor type instead. With ``--device cuda`` (text
only) the photo is uploaded once and letterboxed on the GPU into the device input tensor; the
probability map is copied to the host for the box search. Class names come from
:func:`copyless.model.class_names` (``--labels FILE`` for your own detector, else the names
the model records).

One photo, one synchronous round at a time, so no Pipeline: SIGINT / SIGTERM end the timed
rounds after the one running, the boxes and the block are reported and the image written,
then one ``stopped by`` line and exit 130 / 143 (see :mod:`._setup`).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..model import class_names, load_model, task_of, zoo
from ..pipeline import StageClock
from ..runner import Runner
from ..types import CopylessError, NpuTensorInfo, TensorDirection
from ..vision import (
    IMAGE_FORMATS,
    Detection,
    Placement,
    Preparer,
    class_mask,
    detections,
    download,
    draw_boxes,
    draw_detections,
    draw_mask,
    image_size,
    limit_side,
    mask_summary,
    mask_to_image,
    preparer_for,
    text_boxes,
    to_image,
)
from ._checks import UsageError, check_model_path, check_output, model_task, task_mismatch
from ._memory import APP_BASE, MemoryBudget, photo_bytes
from ._models import OBJECT_DETECTORS, builtin_detector, builtin_object_detector
from ._output import Output, detection_fields
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

TEXT_THRESHOLD = 0.3
#: copyless-detect's peak resident memory with a built-in detector compiled for a frame:
#: (bytes, bytes per frame pixel), measured with /usr/bin/time on the first run (which also
#: compiles the model; later runs need ~25% less): CenterFace 0.33 GB at 512x512, 0.72 at
#: 1024x1024, 2.3 at 2048x2048, 4.9 at 3072x3072; PP-PicoDet (resized to 800x608 in the
#: graph) 0.44 GB at 1024x1024, 1.6 at 3072x3072.
DETECTOR_PEAK = {"face": (250 << 20, 520), "layout": (350 << 20, 140)}
#: What ``--model`` (or a built-in name given to ``-m``) detects.
TASKS = ("text", *OBJECT_DETECTORS)
#: The tasks a ``-m`` model may record (:func:`copyless.model.task_of`).
RECORDED = (*TASKS, "detect", "segment")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = image_parser(
        "copyless-detect",
        "Zero-copy detection: text (PP-OCRv4), faces (CenterFace), document layout "
        "(PP-PicoDet), or any compiled detector or segmenter (-m; its task record says which).",
        "a compiled detector or segmenter (.rai or directory; its task is read from its "
        "record) or a "
        f"built-in name ({', '.join(TASKS)}); default: the built-in for --model",
    )
    parser.add_argument("-o", "--output",
                        help=f"image to write with the boxes ({', '.join(IMAGE_FORMATS)}; "
                        "the format follows the extension); none by default: the boxes are "
                        "printed only")  # fmt: skip
    parser.add_argument("--model", choices=TASKS,
                        help="what to detect (default: the task -m's model records, else "
                        "text)")  # fmt: skip
    parser.add_argument(
        "--threshold",
        type=float,
        help=f"text: pixel probability cut (default {TEXT_THRESHOLD}); face/layout: score "
        "threshold compiled into the built-in model (default: the reference pipeline's)",
    )
    parser.add_argument(
        "--max-side",
        type=int,
        help="face/layout: feed the built-in detector photos of at most this many pixels on "
        "the longer side, scaled down first, aspect kept (defaults: "
        + ", ".join(
            f"{task} {zoo.entry(name).preprocessing.limit_side}"
            for task, name in OBJECT_DETECTORS.items()
        )
        + "; 0: the photo's own size, memory grows ~330 bytes per pixel for face). Text is "
        "letterboxed to its 640x640 input whatever the size",
    )
    args = parse_image_args(parser, argv)
    if args.max_side is not None and args.max_side < 0:
        parser.error("--max-side must be >= 0")
    builtin_name(args, TASKS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.output is not None:
            check_output(args.output, IMAGE_FORMATS, "image")
        args.model = _task(args)
        _check_memory(args)
    except (UsageError, CopylessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.model == "text":
        return run_image_app(args, builtin_detector, _detect_text)
    if args.model == "segment":  # only a -m model: run_image_app never calls the builtin
        return run_image_app(args, functools.partial(_builtin, args), _segment)
    return run_image_app(args, functools.partial(_builtin, args), _detect_objects)


def _task(args: argparse.Namespace) -> str:
    """The task to run: ``--model``, checked against what the ``-m`` model's task record
    says (a classifier is refused, a face model runs as face without ``--model face``, any
    other detector as ``detect``, a segmenter as ``segment``)."""
    if args.model_dir is None:
        return str(args.model or "text")
    path = check_model_path(args.model_dir)
    task = model_task(load_model(path))
    refusal = task_mismatch(path, task, RECORDED)
    if refusal is not None:
        raise UsageError(refusal)
    if args.model is not None and args.model != task:
        what = "segmenter" if task == "segment" else f"{task} detector"
        raise UsageError(f"{path} is a {what}, not a {args.model} one (--model)")
    return task


def _frame(args: argparse.Namespace, height: int, width: int) -> tuple[tuple[int, int], int]:
    """The frame a built-in detector is compiled for, and the limit side that sets it."""
    name = OBJECT_DETECTORS[args.model]
    limit = zoo.entry(name).preprocessing.limit_side if args.max_side is None else args.max_side
    return limit_side(height, width, limit or None), int(limit or 0)


def _check_memory(args: argparse.Namespace) -> None:
    """Refuse (UsageError, one line) a run whose estimated peak is more than the memory the
    app may use (see :mod:`._memory`); nothing for an image that cannot be read (the run
    reports it as before)."""
    try:
        height, width = image_size(args.image)
    except (OSError, ValueError):
        return
    photo = photo_bytes(args.image, height, width)
    budget = MemoryBudget.of(args.max_memory)
    if args.model == "text" or args.model_dir is not None:
        budget.check(APP_BASE + photo, f"the {width}x{height} photo", "use a smaller image")
        return
    (frame_h, frame_w), limit = _frame(args, height, width)
    base, per_pixel = DETECTOR_PEAK[args.model]
    estimate = base + per_pixel * frame_h * frame_w + photo
    # the longest side whose frame fits: pixels scale with the side squared
    room = max(0, budget.limit - base - photo) / per_pixel
    side = int(math.sqrt(room * max(height, width) / min(height, width))) // 32 * 32
    lower = f"--max-side {side} fits" if side >= 32 else "no --max-side fits"
    budget.check(estimate, f"the {args.model} detector at {frame_w}x{frame_h} "
                 f"(--max-side {limit})", lower)  # fmt: skip


def _builtin(args: argparse.Namespace) -> Path:
    """The zoo detector compiled for frames of the image's size (read from its header), or
    of the size policy's smaller size when the photo exceeds the model's limit side."""
    name = OBJECT_DETECTORS[args.model]
    height, width = image_size(args.image)
    frame, limit = _frame(args, height, width)
    if frame != (height, width):
        print(f"note: the {width}x{height} photo is fed to the detector at {frame[1]}x"
              f"{frame[0]} (--max-side {limit}; --max-side 0 keeps its size); boxes are in "
              "the photo's pixels", file=sys.stderr)  # fmt: skip
    extra = {} if args.threshold is None else {"score_threshold": args.threshold}
    return builtin_object_detector(name, frame, **extra)


def _detect_text(runner: Runner, image: npt.NDArray[np.uint8], args: argparse.Namespace) -> int:
    view = tensor_type(args)
    (in_info,) = runner.get_tensors_info(TensorDirection.INPUT, view)
    (out_info,) = runner.get_tensors_info(TensorDirection.OUTPUT, view)
    prepare = preparer_for(runner, in_info)
    if prepare.assumed:
        print(warning(args.model_dir or runner.model.name, prepare.assumed, prepare.policy),
              file=sys.stderr)
    x = runner.allocate_npu_tensor(in_info)
    y = runner.allocate_npu_tensor(out_info)
    threshold = TEXT_THRESHOLD if args.threshold is None else args.threshold
    done = timed_runs(
        runner,
        x,
        y,
        args.runs,
        prepare.writer(image, x),
        lambda placement: text_boxes(download(y), placement, threshold=threshold),
        args.interruption,
    )
    if done is None:
        return 1
    boxes, times = done
    path = None if args.output is None else draw_boxes(image, boxes, args.output)
    found = [Detection(box, 0, "text") for box in boxes]
    _report(Output.from_args(args), f"text boxes: {len(boxes)}", found, path, times)
    return 0


def _detect_objects(runner: Runner, image: npt.NDArray[np.uint8], args: argparse.Namespace) -> int:
    """Any detector whose task record names boxes, scores and class ids: the zoo's
    CenterFace / PicoDet compiled for the photo, a YOLO head or torchvision's decoded
    outputs; the photo prepared as the record says, the boxes mapped back to its pixels."""
    view = tensor_type(args)
    (in_info,) = runner.get_tensors_info(TensorDirection.INPUT, view)
    x = runner.allocate_npu_tensor(in_info)
    if x.device_memory is not None:
        print("error: --device cuda runs --model text only; other detectors run on the host",
              file=sys.stderr)  # fmt: skip
        return 2
    roles = dict(task_of(runner.model).roles)
    missing = [role for role in ("boxes", "scores", "classes") if role not in roles]
    if missing:
        print(f"error: the model's task record names no {missing} outputs: compile it with "
              "--task detect", file=sys.stderr)  # fmt: skip
        return 2
    outputs = {
        info.name: runner.allocate_npu_tensor(info)
        for info in runner.get_tensors_info(TensorDirection.OUTPUT, view)
    }
    prepare = _preparer(runner, in_info, args)
    labels = class_names(runner.model, args.labels)
    size = (image.shape[0], image.shape[1])
    done = timed_runs(
        runner,
        x,
        list(outputs.values()),
        args.runs,
        lambda: prepare.to_photo(prepare(image, x), size),
        lambda placement: _read(outputs, roles, labels, placement),
        args.interruption,
    )
    if done is None:
        return 1
    found, times = done
    path = None if args.output is None else draw_detections(image, found, args.output)
    _report(Output.from_args(args), f"detections: {len(found)}", found, path, times)
    return 0


def _segment(runner: Runner, image: npt.NDArray[np.uint8], args: argparse.Namespace) -> int:
    """A segmenter (its mask, or class scores whose argmax is taken here): the classes it
    found in the photo (pixels, fraction) and, with ``-o``, the photo with them painted."""
    view = tensor_type(args)
    (in_info,) = runner.get_tensors_info(TensorDirection.INPUT, view)
    x = runner.allocate_npu_tensor(in_info)
    if x.device_memory is not None:
        print("error: --device cuda runs --model text only; segmenters run on the host",
              file=sys.stderr)  # fmt: skip
        return 2
    record = task_of(runner.model)
    name = record.output("mask") or record.output("class_scores")
    outputs = {info.name: runner.allocate_npu_tensor(info)
               for info in runner.get_tensors_info(TensorDirection.OUTPUT, view)}  # fmt: skip
    if name not in outputs:
        print("error: the model's task record names no mask or class-score output: compile "
              "it with --task segment", file=sys.stderr)  # fmt: skip
        return 2
    prepare = _preparer(runner, in_info, args)
    labels = class_names(runner.model, args.labels)
    size = (image.shape[0], image.shape[1])
    done = timed_runs(
        runner, x, list(outputs.values()), args.runs,
        lambda: prepare.to_photo(prepare(image, x), size),
        lambda placement: mask_to_image(class_mask(outputs[name]), placement, size),
        args.interruption,
    )  # fmt: skip
    if done is None:
        return 1
    mask, times = done
    found = mask_summary(mask, labels)
    path = None if args.output is None else draw_mask(image, mask, args.output)
    out = Output.from_args(args)
    out.say(f"classes: {len(found)}")
    for part in found:
        out.say(part.line())
        out.record("class", class_id=part.class_id, label=part.label, pixels=part.pixels,
                   fraction=round(part.fraction, 4))  # fmt: skip
    if path is not None:
        out.say(f"saved {path}")
    report_timing(out, times)
    out.summary(classes=len(found), output=None if path is None else str(path))
    return 0


def _preparer(runner: Runner, info: NpuTensorInfo, args: argparse.Namespace) -> Preparer:
    """The record's preparer, with the app's warning for what the record lacks."""
    prepare = preparer_for(runner, info)
    if prepare.assumed:
        print(warning(args.model_dir or runner.model.name, prepare.assumed, prepare.policy),
              file=sys.stderr)
    return prepare


def _report(
    out: Output, summary: str, found: list[Detection], path: Path | None, times: StageClock
) -> None:
    out.say(summary)
    for det in found:
        out.say(det.line())
        out.record("detection", **detection_fields(det))
    if path is not None:
        out.say(f"saved {path}")
    report_timing(out, times)
    out.summary(detections=len(found), output=None if path is None else str(path))


def _read(
    outputs: dict[str, NpuTensor], roles: dict[str, str], labels: list[str], placement: Placement
) -> list[Detection]:
    """The detections the job produced, in photo pixels (``placement``: where the photo
    lies in the model's frame; ``roles``: the task record's role -> output name)."""
    scores = outputs[roles["scores"]]
    shape = scores.produced_shape
    count = shape[0] if shape else scores.info.shape[0]
    marks = roles.get("landmarks")
    found = detections(
        outputs[roles["boxes"]],
        scores,
        outputs[roles["classes"]],
        labels,
        count=count,
        landmarks=None if marks is None else outputs[marks],
    )
    return to_image(found, placement)
