"""The compiler: an ONNX model in, a :class:`CompiledModel` (or its files) out.

``compile_model(model, output, **options)`` / ``compile_to_memory(model, **options)``.
With no options the HW view of every tensor equals its CPU view (the model's own dtype
and layout), so any ONNX model onnxruntime runs compiles. Options (CLI flags in
parentheses; see ``copyless-compile --help``):

``batch_size=N`` (``--batch-size``)
    Symbolic batch dims (dim 0, and every dim sharing its symbol) become N (default 1).
``input_shapes={"x": (1, 3, 640, 640)}`` (``--input-shape x=1x3x640x640``)
    Fixes an input's shape; needed for symbolic dims other than the batch.
``input_format="rgbx"``, ``mean=(r, g, b)``, ``std=(r, g, b)``
(``--input-format rgbx --mean R,G,B --std R,G,B``)
    The input's HW view becomes UINT8 NHWC4 ``[N, H, W, 4]``: packed RGBx pixels as a JPEG
    decoder writes them (the 4th byte is ignored). The graph starts with Transpose to NCHW,
    Slice (drop x), Cast and ``(x - mean) / std``, folded into the first convolution where it
    can be (see :mod:`._stem`), else one Mul + Add; mean/std are in pixel units (0..255;
    default 0 and 1). The CPU view becomes float32 NCHW ``[N, 3, H, W]`` in pixel
    units, *not* normalised, with ``quant = QuantParameters(1.0, 0)``: the runner's CPU->HW
    conversion is then round + saturate to uint8 + pad the 4th channel.
``input_size=(H, W)`` (``--input-size HxW``), with ``input_format="rgbx"``
    The HW view is the decoder's frame, ``[N, H, W, 4]`` RGBx uint8 of any size, and the
    graph resizes it (``Resize`` linear, antialiased like PIL's bilinear when the model's
    opset can be moved to 18) to the model's own H x W before the normalisation. The CPU
    view is float32 ``[N, 3, H, W]`` pixels of the frame size. Aspect ratio is not kept:
    crop before, or accept the stretch.
``input_crop=0.875`` (``--input-crop``), with ``input_size``
    Centre-crop the frame to the model's aspect ratio first (a ``Slice``; 0.875 is
    torchvision's ``Resize(256)`` + ``CenterCrop(224)``), then resize.
``input_format="rgbx_fp16" | "rgbx_bf16" | "rgbp" | "rgbp_fp16" | "rgbp_float"``
    The same in other pixel formats (packed RGBx FP16/BF16, planar RGB); see
    :mod:`._input_formats`. Integer HW views carry ``QuantParameters(1.0, 0)``, float ones none.
``input_format="i420" | "nv12"``, ``yuv_matrix="bt601" | "bt709"``, ``yuv_range``,
``input_line_sizes=(luma, chroma)``
    The input becomes the video decoder's uint8 planes (one graph input each, lines padded
    as the decoder pads them with ``input_line_sizes``) and the graph converts them to RGB;
    see :mod:`._yuv`.
``input_layout`` / ``input_dtype`` / ``output_layout`` / ``output_dtype`` (``--input-layout`` ...)
    The HW view's layout (``NHWC``, ``NHWC4``, ``NC4HW4``, ``HCWNC4`` ...) and dtype (``bf16``,
    ``fp16``, ``fp32``; ``int8`` with ``quantize``); one value for every tensor or a
    ``{name: value}`` dict. Shapes come from :func:`copyless.layout.hw_info_for`; channel
    padding is dropped on input (Slice) and written as zeros on output (Pad, before the
    final Cast/QuantizeLinear). BF16 graph inputs/outputs are genuine ``tensor(bfloat16)``:
    onnxruntime's CPU Cast handles them, but its numpy front door does not, so bind them as
    ``OrtValue.ortvalue_from_numpy_with_onnx_type(arr.view(np.uint16), TensorProto.BFLOAT16)``.
``precision="int8"``, ``calibration=DIR | [paths] | images`` (``--precision int8 --calibration
DIR``; ``quantize="int8"`` / ``--quantize int8`` is the same)
    Post-training INT8 by NNCF, in the QDQ form onnxruntime fuses (uint8 activations per
    tensor, int8 weights per channel; see :mod:`._quantize`), calibrated on images as users
    have them (:mod:`._calibration`). Float inputs get an INT8 HW view (UINT8 RGBx with
    ``input_format="rgbx"``) and float outputs an INT8 HW view, each with the graph's own
    QuantParameters. ``quantize_ops=("Conv", ...)`` (``--quantize-ops``) limits which op
    types are quantized. ``max_drop=PCT`` (``--max-drop``): accuracy control on
    ``validation=`` images (``--validation DIR``) or the held-out fifth of the calibration
    images (:mod:`._accuracy`).
``precision="bf16" | "fastest"`` (``--precision``)
    BF16 arithmetic on OpenVINO (:mod:`._bf16`); the fastest of fp32, bf16 and int8 at a
    stated agreement (:mod:`._fastest`). Every reduced precision records its agreement with
    fp32 and its speed (:mod:`._precision`).
``cpu_ops=("Softmax",)`` | ``cpu_partition_after="name"`` | ``cpu_tail=True``
(``--cpu-ops Softmax,TopK``, ``--cpu-partition-after NAME``, ``--cpu-tail``)
    Split into ``par_0`` (target ``npu``) and ``par_1`` (target ``cpu``); see :mod:`._partition`.
``resize="crop:0.875" | "letterbox:114" | "stretch"``, ``colour_order="rgb" | "bgr"``
(``--resize``, ``--colour-order``)
    Recorded, with mean/std, for the applications that feed the model (metadata key
    ``"preprocessing"``; see :mod:`._preprocessing`); they do not change the graph.
``output_capacity={"boxes": (100, 6)}`` (``--output-capacity boxes=100x6``)
    The capacity of an output whose shape depends on the data (see :mod:`._capacity`): by
    default each such dim reports the bound the compiler derives, or -1 where it knows none.
``task="classify" | "detect" | "segment"``, ``labels=FILE | [names]`` (``--task``, ``--labels``)
    What the outputs mean, recorded in the model (metadata ``"task"``; see :mod:`._task`),
    recognised from the outputs when not given; a task the outputs contradict, or labels of
    the wrong length, is refused in one line. A YOLOv8/YOLO11 head ``[N, 4 + C, A]`` gets
    its decoding and NMS folded in (``score_threshold`` ...: ultralytics' predict defaults),
    a segmenter's ``[N, C, H, W]`` scores their argmax (output ``mask [N, H, W]``), and a
    ``[3, H, W]`` input (torchvision's detection export) a batch dimension.
``name="..."`` (``--name``)
    The compiled model's name (default: the file stem or the graph name).

Every partition is loaded in an onnxruntime session before the compiler returns, so a bad
compile fails here, not in the runner. Graphs are written with IR version 10.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import onnx

from ..layout import hw_info_for
from ..types import (
    DataType,
    LayoutError,
    MemoryLayout,
    NpuTensorInfo,
    OptionError,
    QuantParameters,
    TensorDirection,
    TensorType,
    UnsupportedError,
)
from ._archive import write_archive
from ._artifact import COMPILER_VERSION
from ._artifact import artifact_key as artifact_key  # where callers found it
from ._compiled import CompiledModel, Intermediate, Partition, TensorSpec
from ._directory import write_directory
from ._fastest import reduce_precision
from ._folding import Fold, check_opset, fold_input, fold_output
from ._graph import IR_VERSION, NameScope, cpu_layout_for, graph_inputs, tensor_value_info
from ._input_formats import input_format
from ._options import CompileOptions, parse_options
from ._partition import Part, find_cut, forward_boundaries, split
from ._pixels import normalization, pixel_geometry
from ._precision import KEY as PRECISION_KEY
from ._preprocessing import KEY as PREPROCESSING_KEY
from ._preprocessing import record as record_preprocessing
from ._quantize import Quantized
from ._shapes import ORT_ERRORS, check_interface, fix_inputs, load_source, output_infos, probe
from ._shapes import session as ort_session
from ._task import KEY as TASK_KEY
from ._task_compile import (
    TaskPlan,
    add_batch_dim,
    decoded_capacity,
    fold_task_mask,
    plan_task,
    task_defaults,
    task_metadata,
)
from ._yuv import fold_yuv_input, is_yuv, plane_folds
from .postprocess import Folded, PostprocessOptions, fold_postprocess

_log = logging.getLogger(__name__)

#: Who compiled a model, as its metadata records it: the public entry point, never a private
#: module path (models before this recorded ``copyless.model._compiler/<version>``; nothing
#: reads the field back to decide anything, so both load the same).
COMPILER_ID = "copyless.compile_model"


def compile_model(model: str | Path | onnx.ModelProto, output: str | Path, **options: Any) -> Path:
    """Compile ``model`` and write it to ``output``: a ``.rai`` file when the name ends in
    ``.rai``, else a directory holding the self-contained ``vaiml_par_0`` partition
    directory (see :mod:`._directory`)."""
    compiled = compile_to_memory(model, **options)
    out = Path(output)
    if out.suffix == ".rai":
        return write_archive(compiled, out)
    return write_directory(compiled, out)


def compile_to_memory(model: str | Path | onnx.ModelProto, **options: Any) -> CompiledModel:
    """Compile ``model`` without writing files (the options are those of :func:`compile_model`)."""
    opts = parse_options(options)
    source = load_source(model)
    default_name = source.graph.name or "model"
    if not isinstance(model, onnx.ModelProto):
        default_name = Path(model).stem
    return _compile(source, opts, opts.name or default_name)


def _compile(model: onnx.ModelProto, opts: CompileOptions, name: str) -> CompiledModel:
    check_interface(model)
    model.ir_version = min(model.ir_version or IR_VERSION, IR_VERSION)
    batch_added = add_batch_dim(model, opts.batch_size, bool(opts.input_shapes))
    fixed = fix_inputs(model, opts)
    _check_single_input(opts, fixed.infos)
    plan = plan_task(model, opts.task, opts.postprocess, opts.thresholds, opts.labels,
                     fixed.infos)  # fmt: skip
    folded = None
    if plan.postprocess is not None:
        if opts.input_crop is not None:
            raise OptionError(
                "postprocess scales boxes to the whole input_size frame; drop input_crop"
            )
        folded = _postprocess(model, plan.postprocess, fixed.infos[0], opts.input_size)
    mask_nodes = fold_task_mask(model, plan)
    opts = dataclasses.replace(opts, output_capacity=decoded_capacity(plan, opts.output_capacity))
    # the detection outputs' capacity (max_detections) is derived like any other's
    cpu_outputs, unknown = output_infos(model, probe(model), opts)
    _check_names(opts, fixed.infos, cpu_outputs)
    float_nodes = (*(folded.nodes if folded else ()), *mask_nodes)
    quantized, reduced = reduce_precision(model, opts, fixed.infos, float_nodes)
    work = quantized.model if quantized else model
    yuv = is_yuv(opts)
    in_folds = (
        plane_folds(fixed.infos[0], opts)
        if yuv
        else [_input_fold(info, opts, quantized) for info in fixed.infos]
    )
    out_folds = [_output_fold(info, opts, quantized, unknown) for info in cpu_outputs]
    _declare_outputs(work, cpu_outputs, unknown)
    folds = [f for f in (*in_folds, *out_folds) if not f.identity]
    if folds or yuv:
        check_opset(work, "folding view conversions into the graph")
        scope = NameScope(work.graph)
        if yuv:
            fold_yuv_input(work, scope, fixed.infos[0], opts)
        for fold in in_folds:
            if not fold.identity:
                fold_input(work, scope, fold)
        for fold in out_folds:
            if not fold.identity:
                fold_output(work, scope, fold)
    parts, intermediates = _partition(work, opts)
    partitions = tuple(_finish(i, part) for i, part in enumerate(parts))
    fmt = input_format(opts.input_format)
    pixels = fmt is not None and fmt.quantized_pixels
    inputs = tuple(
        TensorSpec(f.cpu.name, f.cpu, f.hw, QuantParameters(1.0, 0) if pixels else f.quant)
        for f in in_folds
    )
    outputs = tuple(
        TensorSpec(
            f.cpu.name, f.cpu, f.hw, f.quant, f.cpu.name in unknown, unknown.get(f.cpu.name, ())
        )
        for f in out_folds
    )
    _log.info("compiled %s: %d partition(s), batch %d", name, len(partitions), fixed.batch_size)
    _log_capacities(outputs)
    return CompiledModel(
        name=name,
        inputs=inputs,
        outputs=outputs,
        partitions=partitions,
        intermediates=intermediates,
        batch_size=fixed.batch_size,
        metadata={
            "compiler": f"{COMPILER_ID}/{COMPILER_VERSION}",
            "producer": f"{model.producer_name} {model.producer_version}".strip(),
            "options": json.dumps(opts.to_json(), sort_keys=True),
            PREPROCESSING_KEY: _preprocessing(opts, fixed.infos, plan),
            TASK_KEY: task_metadata(plan, folded, cpu_outputs, batch_added, unknown),
            **({PRECISION_KEY: json.dumps(reduced)} if reduced else {}),
        },
    )


def _preprocessing(opts: CompileOptions, inputs: tuple[NpuTensorInfo, ...],
                   plan: TaskPlan) -> str:  # fmt: skip
    """The preprocessing record of the (first) image input, as the metadata stores it: what
    the options say, the task's usual colour order and resize where they say nothing and the
    model was given its normalisation (see :func:`task_defaults`)."""
    image = inputs[0] if inputs else None
    size = None
    if image is not None and len(image.shape) == 4:
        size = (image.shape[2], image.shape[3])
    colour, resize = opts.colour_order, opts.resize
    if opts.mean is not None or opts.std is not None:
        colour, resize = task_defaults(plan, colour, resize)
    return record_preprocessing(
        input_format=opts.input_format,
        mean=opts.mean,
        std=opts.std,
        colour_order=colour,
        resize=resize,
        frame=opts.input_size or size,
        model_size=size,
    )


def _postprocess(
    model: onnx.ModelProto,
    options: PostprocessOptions,
    model_input: NpuTensorInfo,
    frame: tuple[int, int] | None,
) -> Folded:
    """Fold the detector decoding + NMS (boxes scaled to the ``input_size`` frame, if any)."""
    folded = fold_postprocess(model, options, model_input, frame)
    _log.info(
        "folded %s postprocess: outputs %s, capacity %d",
        options.kind,
        list(folded.outputs),
        options.max_detections,
    )
    return folded


def _log_capacities(outputs: tuple[TensorSpec, ...]) -> None:
    for spec in outputs:
        if not spec.dynamic:
            continue
        dims, shape = list(spec.dynamic_dims), list(spec.cpu.shape)
        if spec.cpu.bounded:
            _log.info("output %r: data-dependent dims %s, capacity %s", spec.name, dims, shape)
        else:
            _log.warning(
                "output %r %s: data-dependent dims with no known bound (-1); allocate it "
                "with the capacity you need, or compile with output_capacity "
                "(--output-capacity %s=...)", spec.name, shape, spec.name,
            )  # fmt: skip


def _check_names(
    opts: CompileOptions, inputs: tuple[NpuTensorInfo, ...], outputs: tuple[NpuTensorInfo, ...]
) -> None:
    ins, outs = {i.name for i in inputs}, {o.name for o in outputs}
    for key, table, names in (
        ("input_layout", opts.input_layout, ins),
        ("input_dtype", opts.input_dtype, ins),
        ("output_layout", opts.output_layout, outs),
        ("output_dtype", opts.output_dtype, outs),
    ):
        for tensor, _ in table:
            if tensor != "*" and tensor not in names:
                raise OptionError(f"{key}: {tensor!r} is not among the model's {sorted(names)}")


def _check_single_input(opts: CompileOptions, inputs: tuple[NpuTensorInfo, ...]) -> None:
    if (opts.input_format or opts.precision or opts.postprocess) and len(inputs) != 1:
        raise UnsupportedError(
            "input_format/precision/postprocess need a single-input model; this one has "
            f"{len(inputs)} inputs"
        )


def _hw_view(cpu: NpuTensorInfo, layout: MemoryLayout | None, dtype: DataType) -> NpuTensorInfo:
    if layout is None or (layout is cpu.memory_layout and layout is MemoryLayout.GENERIC):
        return dataclasses.replace(cpu, tensor_type=TensorType.HW, data_type=dtype)
    try:
        return hw_info_for(cpu, layout, dtype)
    except (LayoutError, UnsupportedError) as exc:
        raise OptionError(f"tensor {cpu.name!r}: no {layout.name} view: {exc}") from exc


def _dtype_and_quant(
    cpu: NpuTensorInfo, wanted: DataType | None, quant: QuantParameters | None, key: str
) -> tuple[DataType, QuantParameters | None]:
    dtype = wanted or (DataType.INT8 if quant is not None else cpu.data_type)
    if dtype is cpu.data_type:
        return dtype, None
    if cpu.data_type.is_float and dtype.is_float:
        return dtype, None
    if cpu.data_type.is_float and dtype is DataType.INT8 and quant is not None:
        return dtype, quant
    raise OptionError(
        f"{key}={dtype.name} for {cpu.describe()}: the views must be the same dtype, two float "
        "dtypes, or INT8 with precision='int8'"
    )


def _input_fold(cpu: NpuTensorInfo, opts: CompileOptions, q: Quantized | None) -> Fold:
    layout = opts.pick(opts.input_layout, cpu.name)
    wanted = opts.pick(opts.input_dtype, cpu.name)
    fmt = input_format(opts.input_format)
    if fmt is not None:
        if layout is not None or wanted is not None:
            raise OptionError(
                f"input_format={fmt.name!r} fixes the input view; drop input_layout/dtype"
            )
        pixels, geometry = pixel_geometry(cpu, opts)
        hw = hw_info_for(pixels, fmt.memory_layout, fmt.data_type)
        return Fold(
            pixels, hw, cpu.data_type, None, normalization(opts), *geometry, opts.input_crop
        )
    quant = q.inputs.get(cpu.name) if q else None
    dtype, quant = _dtype_and_quant(cpu, wanted, quant, "input_dtype")
    return Fold(cpu, _hw_view(cpu, layout, dtype), cpu.data_type, quant)


def _output_fold(
    cpu: NpuTensorInfo,
    opts: CompileOptions,
    q: Quantized | None,
    unknown: dict[str, tuple[int, ...]],
) -> Fold:
    layout = opts.pick(opts.output_layout, cpu.name)
    wanted = opts.pick(opts.output_dtype, cpu.name)
    quant = q.outputs.get(cpu.name) if q else None
    dtype, quant = _dtype_and_quant(cpu, wanted, quant, "output_dtype")
    if cpu.name in unknown:
        if layout is not None and layout is not cpu.memory_layout:
            raise UnsupportedError(
                f"output {cpu.name!r} has data-dependent dims {list(unknown[cpu.name])}; its "
                "HW view can change the dtype but not the layout"
            )
        hw = dataclasses.replace(cpu, tensor_type=TensorType.HW, data_type=dtype)
        return Fold(cpu, hw, cpu.data_type, quant)
    return Fold(cpu, _hw_view(cpu, layout, dtype), cpu.data_type, quant)


def _declare_outputs(
    model: onnx.ModelProto,
    infos: tuple[NpuTensorInfo, ...],
    unknown: dict[str, tuple[int, ...]],
) -> None:
    """Write the resolved output shapes into the graph (dynamic dims stay symbolic)."""
    by_name = {i.name: i for i in infos}
    for vi in model.graph.output:
        info = by_name[vi.name]
        dyn = unknown.get(vi.name, ())
        dims = [f"{vi.name}_dim{i}" if i in dyn else d for i, d in enumerate(info.shape)]
        vi.CopyFrom(tensor_value_info(vi.name, info.data_type, dims))


def _partition(
    work: onnx.ModelProto, opts: CompileOptions
) -> tuple[list[Part], tuple[Intermediate, ...]]:
    graph = work.graph
    if not opts.partitioned:
        names = tuple(vi.name for vi in graph_inputs(graph))
        return [Part(work, names, tuple(vi.name for vi in graph.output))], ()
    cut = forward_boundaries(work, find_cut(graph, opts))
    probed = probe(work, cut.crossing)
    infos = {vi.name: vi for vi in (*graph_inputs(graph), *graph.output)}
    intermediates = []
    for tensor in cut.crossing:
        p = probed.get(tensor)
        if p is None:
            raise UnsupportedError(f"onnxruntime cannot type tensor {tensor!r} at the cut")
        if p.dynamic_dims:
            raise UnsupportedError(
                f"tensor {tensor!r} crosses the partition cut with a data-dependent shape; "
                "choose another cut"
            )
        info = NpuTensorInfo(
            tensor,
            p.dtype,
            TensorDirection.OUTPUT,
            TensorType.HW,
            cpu_layout_for(len(p.shape)),
            p.shape,
        )
        infos[tensor] = tensor_value_info(tensor, p.dtype, p.shape)
        intermediates.append(Intermediate(tensor, info))
    return split(work, cut, infos), tuple(intermediates)


def _finish(index: int, part: Part) -> Partition:
    part.model.ir_version = min(part.model.ir_version or IR_VERSION, IR_VERSION)
    data = part.model.SerializeToString()
    name = f"par_{index}"
    try:
        ort_session(data)
    except ORT_ERRORS as exc:
        raise UnsupportedError(
            f"compiled partition {name} does not load in onnxruntime: {exc}"
        ) from exc
    return Partition(name, "npu" if index == 0 else "cpu", data, part.inputs, part.outputs)
