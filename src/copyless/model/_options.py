"""Compiler options: parsed and validated once, before the compiler touches the model.

Every option is a keyword of :func:`copyless.model.compile_model` and a flag of
``copyless-compile`` (see that module's docstring for the full list and semantics).
Per-tensor options (``input_layout``, ``input_dtype``, ``output_layout``, ``output_dtype``)
take either one value for every tensor or a ``{tensor_name: value}`` mapping.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..types import DataType, MemoryLayout, OptionError
from ._calibration import calibration_items
from ._input_formats import YUV_MATRICES, YUV_RANGES, input_format, yuv_option
from ._preprocessing import ResizePolicy, parse_colour_order, parse_resize
from ._task import TASKS, parse_labels
from .postprocess import PostprocessOptions, parse_postprocess

_DTYPE_ALIASES = {
    "bf16": DataType.BF16,
    "bfloat16": DataType.BF16,
    "fp16": DataType.FP16,
    "float16": DataType.FP16,
    "half": DataType.FP16,
    "fp32": DataType.FLOAT32,
    "float32": DataType.FLOAT32,
    "float": DataType.FLOAT32,
    "int8": DataType.INT8,
    "uint8": DataType.UINT8,
    "bool": DataType.BOOLEAN,
}

_KNOWN = frozenset(
    {
        "name",
        "batch_size",
        "input_shapes",
        "input_format",
        "input_size",
        "input_crop",
        "input_line_sizes",
        "yuv_matrix",
        "yuv_range",
        "mean",
        "std",
        "input_layout",
        "input_dtype",
        "output_layout",
        "output_dtype",
        "quantize",
        "quantize_ops",
        "calibration",
        "validation",
        "max_drop",
        "min_agreement",
        "precision",
        "cpu_ops",
        "cpu_partition_after",
        "cpu_tail",
        "resize",
        "colour_order",
        "postprocess",
        "score_threshold",
        "iou_threshold",
        "max_detections",
        "output_capacity",
        "task",
        "labels",
    }
)

PerTensor = dict[str, Any]  # tensor name -> value; key "*" applies to every tensor


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """The validated options of one compilation."""

    name: str | None = None
    batch_size: int = 1
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    input_format: str | None = None  # None or a key of input_formats.INPUT_FORMATS
    input_size: tuple[int, int] | None = None  # (H, W) of the frames (with input_format)
    input_crop: float | None = None  # centre-crop fraction of the frame (with input_size)
    input_line_sizes: tuple[int, int] | None = None  # i420/nv12: bytes per luma/chroma line
    yuv_matrix: str = "bt601"  # i420/nv12 only: "bt601" or "bt709"
    yuv_range: str = "limited"  # i420/nv12 only: "limited" or "full"
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    input_layout: tuple[tuple[str, MemoryLayout], ...] = ()
    input_dtype: tuple[tuple[str, DataType], ...] = ()
    output_layout: tuple[tuple[str, MemoryLayout], ...] = ()
    output_dtype: tuple[tuple[str, DataType], ...] = ()
    quantize_ops: tuple[str, ...] = ()  # op types to quantize; () = the quantizer's default
    #: calibration / validation images: paths and in-memory images (see ._calibration)
    calibration: tuple[Any, ...] = field(default=(), compare=False)
    validation: tuple[Any, ...] = field(default=(), compare=False)
    #: INT8 accuracy control: top-1 agreement with fp32 may drop this many points (see
    #: ._accuracy); "fastest": the drop every reduced precision is held to
    max_drop: float | None = None
    min_agreement: float | None = None  # INT8/BF16: refuse below this top-1 agreement (percent)
    #: the arithmetic the model runs in: None (its own), "int8" (NNCF's, see ._quantize;
    #: ``quantize="int8"`` is the same), "bf16" (OpenVINO's, measured and recorded) or
    #: "fastest" (measured among fp32, bf16 and int8; see ._fastest)
    precision: str | None = None
    cpu_ops: tuple[str, ...] = ()
    cpu_partition_after: str | None = None
    cpu_tail: bool = False
    resize: ResizePolicy | None = None  # recorded for applications (see .preprocessing)
    colour_order: str | None = None  # "RGB" | "BGR", recorded for applications
    postprocess: PostprocessOptions | None = None  # detector decoding + NMS folded in
    output_capacity: tuple[tuple[str, tuple[int, ...]], ...] = ()
    task: str | None = None  # "classify" | "detect" | "segment"; None: recognised (._task)
    labels: tuple[str, ...] | None = None  # class names, recorded with the task
    #: score/IoU thresholds and max detections for a YOLO head the compiler recognises
    #: (given without ``postprocess``; checked against the head at compile time)
    thresholds: tuple[Any, Any, Any] | None = None

    @property
    def quantize(self) -> str | None:
        """"int8" where the model's graph is quantized (precision="int8"), else None."""
        return "int8" if self.precision == "int8" else None

    @property
    def partitioned(self) -> bool:
        return bool(self.cpu_ops) or self.cpu_partition_after is not None or self.cpu_tail

    def shape_for(self, name: str) -> tuple[int, ...] | None:
        return dict(self.input_shapes).get(name)

    def pick(self, table: tuple[tuple[str, Any], ...], name: str) -> Any:
        """The per-tensor value for ``name`` (its own entry, else the ``*`` entry, else None)."""
        values = dict(table)
        return values.get(name, values.get("*"))

    def to_json(self) -> dict[str, Any]:
        """A JSON-able record of the options, stored in the compiled model's metadata."""
        return {
            "batch_size": self.batch_size,
            "input_shapes": {k: list(v) for k, v in self.input_shapes},
            "input_format": self.input_format,
            "input_size": None if self.input_size is None else list(self.input_size),
            "input_crop": self.input_crop,
            "input_line_sizes": self.input_line_sizes,
            "yuv_matrix": self.yuv_matrix,
            "yuv_range": self.yuv_range,
            "mean": self.mean,
            "std": self.std,
            "input_layout": {k: v.name for k, v in self.input_layout},
            "input_dtype": {k: v.name for k, v in self.input_dtype},
            "output_layout": {k: v.name for k, v in self.output_layout},
            "output_dtype": {k: v.name for k, v in self.output_dtype},
            "quantize": self.quantize,
            "quantize_ops": list(self.quantize_ops),
            "calibration_images": len(self.calibration),
            "validation_images": len(self.validation),
            "max_drop": self.max_drop,
            "min_agreement": self.min_agreement,
            "precision": self.precision,
            "cpu_ops": list(self.cpu_ops),
            "cpu_partition_after": self.cpu_partition_after,
            "cpu_tail": self.cpu_tail,
            "resize": None if self.resize is None else str(self.resize),
            "colour_order": self.colour_order,
            "postprocess": None if self.postprocess is None else self.postprocess.to_json(),
            "output_capacity": {k: list(v) for k, v in self.output_capacity},
            "task": self.task,
            "thresholds": None if self.thresholds is None else list(self.thresholds),
        }


def parse_options(raw: Mapping[str, Any]) -> CompileOptions:
    """Validate keyword options; OptionError names the bad key or value."""
    unknown = sorted(set(raw) - _KNOWN)
    if unknown:
        raise OptionError(f"unknown compiler option(s) {unknown}; known: {sorted(_KNOWN)}")
    batch = raw.get("batch_size", 1)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise OptionError(f"batch_size must be an int >= 1, got {batch!r}")
    fmt = input_format(raw.get("input_format"))
    size = _input_size(raw.get("input_size"))
    if size is not None and fmt is None:
        raise OptionError("input_size needs an input_format (it sizes the decoder's frame)")
    crop = _crop(raw.get("input_crop"), size)
    keys = ("yuv_matrix", "yuv_range", "input_line_sizes")
    yuv = {k: raw.get(k) for k in keys if raw.get(k) is not None}
    if yuv and (fmt is None or not fmt.yuv):
        raise OptionError(f"{sorted(yuv)} need input_format='i420' or 'nv12'")
    quantize = raw.get("quantize")
    if quantize is not None and str(quantize).lower() != "int8":
        raise OptionError(f"quantize must be 'int8' or None, got {quantize!r}")
    calibration = calibration_items(raw.get("calibration"))
    validation = calibration_items(raw.get("validation"), "validation")
    precision = _precision(raw.get("precision"), quantize, calibration)
    quantize_ops = _op_types(raw.get("quantize_ops"), "quantize_ops")
    if quantize_ops and precision not in ("int8", "fastest"):
        raise OptionError("quantize_ops needs precision='int8' (or quantize='int8')")
    if validation and precision not in ("int8", "fastest"):
        raise OptionError("validation needs precision='int8' or 'fastest'")
    max_drop = _percent(raw.get("max_drop"), "max_drop", precision, ("int8", "fastest"))
    min_agreement = _percent(raw.get("min_agreement"), "min_agreement", precision,
                             ("int8", "bf16", "fastest"))  # fmt: skip
    after = raw.get("cpu_partition_after")
    cpu_ops = _op_types(raw.get("cpu_ops"), "cpu_ops")
    cpu_tail = bool(raw.get("cpu_tail", False))
    if sum((bool(cpu_ops), after is not None, cpu_tail)) > 1:
        raise OptionError("give at most one of cpu_ops, cpu_partition_after and cpu_tail")
    task = _task(raw.get("task"))
    post_raw = raw.get("postprocess")
    keys = ("score_threshold", "iou_threshold", "max_detections")
    thresholds = None
    if post_raw is None and task in (None, "detect") and any(raw.get(k) is not None for k in keys):
        parse_postprocess("yolo", *(raw.get(k) for k in keys))  # checks their ranges
        thresholds = (raw.get(keys[0]), raw.get(keys[1]), raw.get(keys[2]))
    return CompileOptions(
        name=None if raw.get("name") is None else str(raw["name"]),
        batch_size=batch,
        input_shapes=_input_shapes(raw.get("input_shapes")),
        input_format=None if fmt is None else fmt.name,
        input_size=size,
        input_crop=crop,
        input_line_sizes=_line_sizes(raw.get("input_line_sizes")),
        yuv_matrix=yuv_option(raw.get("yuv_matrix"), "yuv_matrix", tuple(YUV_MATRICES), "bt601"),
        yuv_range=yuv_option(raw.get("yuv_range"), "yuv_range", YUV_RANGES, "limited"),
        mean=_triple(raw.get("mean"), "mean", positive=False),
        std=_triple(raw.get("std"), "std", positive=True),
        input_layout=_per_tensor(raw.get("input_layout"), "input_layout", _layout),
        input_dtype=_per_tensor(raw.get("input_dtype"), "input_dtype", _dtype),
        output_layout=_per_tensor(raw.get("output_layout"), "output_layout", _layout),
        output_dtype=_per_tensor(raw.get("output_dtype"), "output_dtype", _dtype),
        quantize_ops=quantize_ops,
        calibration=calibration,
        validation=validation,
        max_drop=max_drop,
        min_agreement=min_agreement,
        precision=precision,
        cpu_ops=cpu_ops,
        cpu_partition_after=None if after is None else str(after),
        cpu_tail=cpu_tail,
        resize=parse_resize(raw.get("resize")),
        colour_order=parse_colour_order(raw.get("colour_order")),
        postprocess=parse_postprocess(
            post_raw, *((None, None, None) if thresholds else (raw.get(k) for k in keys))
        ),
        output_capacity=_input_shapes(raw.get("output_capacity"), "output_capacity"),
        task=task,
        labels=parse_labels(raw.get("labels")),
        thresholds=thresholds,
    )


def _task(value: Any) -> str | None:
    """``task``: None (recognised from the outputs) or one of :data:`._task.TASKS`."""
    if value is None:
        return None
    if not isinstance(value, str) or value.lower() not in TASKS:
        raise OptionError(f"task must be one of {list(TASKS)}, got {value!r}")
    return value.lower()


MAX_INPUT_SIDE = 1 << 14


def _op_types(value: Any, key: str) -> tuple[str, ...]:
    """ONNX op type names: a comma-separated string or a sequence of strings."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(op, str) for op in items):
        raise OptionError(f"{key} must be op type names (a list or 'A,B'), got {value!r}")
    ops = tuple(op.strip() for op in items if op.strip())
    bad = [op for op in ops if not op.isidentifier()]
    if bad:
        raise OptionError(f"{key}: {bad} are not ONNX op type names")
    return ops


def _input_size(value: Any) -> tuple[int, int] | None:
    """``(H, W)``, ``[H, W]`` or ``"HxW"`` -> ``(H, W)``, each side in 1..16384."""
    if value is None:
        return None
    parts: Any = value.lower().split("x") if isinstance(value, str) else value
    try:
        sides = [int(p) if isinstance(value, str) else p for p in parts]
    except (TypeError, ValueError):
        sides = []
    if (
        not isinstance(sides, Sequence)
        or len(sides) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in sides)
        or not all(1 <= v <= MAX_INPUT_SIDE for v in sides)
    ):
        raise OptionError(
            f"input_size must be (H, W) or 'HxW' with sides 1..{MAX_INPUT_SIDE}, got {value!r}"
        )
    return (sides[0], sides[1])


def _line_sizes(value: Any) -> tuple[int, int] | None:
    """``(luma, chroma)`` or ``"LUMA,CHROMA"``: bytes per line of the decoder's planes."""
    if value is None:
        return None
    try:
        items = value.split(",") if isinstance(value, str) else list(value)
        sizes = [int(v) for v in items]
    except (TypeError, ValueError):
        sizes = []
    if len(sizes) != 2 or not all(1 <= v <= 4 * MAX_INPUT_SIDE for v in sizes):
        raise OptionError(f"input_line_sizes must be (luma, chroma) bytes per line, got {value!r}")
    return (sizes[0], sizes[1])


def _crop(value: Any, size: tuple[int, int] | None) -> float | None:
    """``input_crop``: the fraction of the frame's short side kept (0 < f <= 1)."""
    if value is None:
        return None
    if size is None:
        raise OptionError("input_crop needs input_size (it crops the decoder's frame)")
    try:
        fraction = float(value)
    except (TypeError, ValueError):
        fraction = math.nan
    if not 0.0 < fraction <= 1.0:
        raise OptionError(f"input_crop must be a fraction in (0, 1], got {value!r}")
    return fraction


def _layout(value: Any, key: str) -> MemoryLayout:
    if isinstance(value, MemoryLayout):
        return value
    try:
        return MemoryLayout[str(value).upper()]
    except KeyError:
        raise OptionError(f"{key}: unknown memory layout {value!r}") from None


def _dtype(value: Any, key: str) -> DataType:
    if isinstance(value, DataType):
        return value
    text = str(value)
    if text.lower() in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[text.lower()]
    try:
        return DataType[text.upper()]
    except KeyError:
        raise OptionError(f"{key}: unknown data type {value!r}") from None


def _per_tensor(value: Any, key: str, parse: Any) -> tuple[tuple[str, Any], ...]:
    if value is None:
        return ()
    if isinstance(value, Mapping):
        return tuple((str(k), parse(v, key)) for k, v in value.items())
    return (("*", parse(value, key)),)


def _triple(value: Any, key: str, *, positive: bool) -> tuple[float, float, float] | None:
    if value is None:
        return None
    try:
        items = [float(v) for v in value] if isinstance(value, Sequence) else [float(value)] * 3
    except (TypeError, ValueError):
        raise OptionError(f"{key} must be three numbers (r, g, b), got {value!r}") from None
    if len(items) != 3 or not all(math.isfinite(v) and (v > 0 or not positive) for v in items):
        raise OptionError(f"{key} must be three finite numbers{' > 0' if positive else ''}")
    return (items[0], items[1], items[2])


def _input_shapes(
    value: Any, key: str = "input_shapes"
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``{name: shape}`` (``input_shapes``, ``output_capacity``) as (name, dims) pairs."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise OptionError(f"{key} must map tensor names to shapes, got {value!r}")
    out = []
    for name, shape in value.items():
        try:
            dims = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise OptionError(f"{key}[{name!r}]: not a shape: {shape!r}") from None
        if any(d < 0 for d in dims):
            raise OptionError(f"{key}[{name!r}]: negative dimension in {dims}")
        out.append((str(name), dims))
    return tuple(out)


_PRECISIONS = ("fp32", "bf16", "int8", "fastest")


def _precision(value: Any, quantize: Any, calibration: tuple[Any, ...]) -> str | None:
    """``precision``: None / "fp32" (the model's own: None), "bf16", "int8" or "fastest"
    (``quantize="int8"`` is precision "int8"); all but fp32 measure their agreement on
    calibration images."""
    if quantize is not None:
        if value not in (None, "int8"):
            raise OptionError(
                f"precision: give quantize='int8' or precision={value!r}, not both"
            )
        value = "int8"
    if value is None or value == "fp32":
        return None
    if not isinstance(value, str) or value.lower() not in _PRECISIONS:
        raise OptionError(f"precision must be one of {list(_PRECISIONS)}, got {value!r}")
    if not calibration:
        raise OptionError(
            f"precision={value.lower()!r} needs calibration= (a directory, image files or "
            "images like the ones the model will see: its agreement with fp32 is measured on "
            "them)"
        )
    return value.lower()


def _percent(value: Any, key: str, precision: str | None, allowed: tuple[str, ...]) -> float | None:
    """``max_drop`` / ``min_agreement``: a percentage 0..100, with a reduced precision."""
    if value is None:
        return None
    if precision not in allowed:
        wanted = "/".join(repr(p) for p in allowed)
        raise OptionError(f"{key} needs precision={wanted} (or quantize='int8')")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise OptionError(f"{key} must be a percentage 0..100, got {value!r}")
    return float(value)


def parse_shape(text: str, flag: str = "--input-shape") -> tuple[str, tuple[int, ...]]:
    """Parse the CLI form ``name=1x3x640x640`` (of ``flag``, named in the error)."""
    name, sep, dims = text.rpartition("=")
    try:
        if not sep or not name:
            raise ValueError(text)
        return name, tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        raise OptionError(f"{flag} wants NAME=D0xD1x..., got {text!r}") from None
