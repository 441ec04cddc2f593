"""What a compiled model records about its preprocessing, so that applications can feed it.

A model's image input expects pixels prepared a certain way: normalised with a mean and std,
in a colour order, and resized from the photo by a policy (torchvision's resize + centre crop
for classifiers, a letterbox for detectors). The compiler records what it was told in the
compiled model's metadata (key ``"preprocessing"``, JSON), and :func:`preprocessing_of`
reads it back::

    {"mean": [127, 127, 127], "std": [128, 128, 128], "colour_order": "RGB",
     "resize": {"policy": "crop", "crop_fraction": 0.875, "fill": 114},
     "normalization": "graph", "resize_in": "host", "frame": [224, 224]}

* ``normalization``: ``"graph"`` when ``(x - mean) / std`` is folded into the graph (a pixel
  ``input_format``: the application writes pixels), ``"host"`` when the input is the model's
  own float tensor and the application must normalise (mean/std given without an
  ``input_format``), ``None`` when nobody said (no mean/std: whoever feeds the model must
  know).
* ``resize``: the policy (compile option ``resize="crop:0.875" | "letterbox:114" |
  "stretch"``), ``None`` when not given.
* ``resize_in``: ``"host"`` when the input has the model's own size (the application's fused
  kernel resizes the photo into it), ``"graph"`` when the input is a frame of another size
  (``input_size``) that the graph resizes. ``frame`` is the input's ``(H, W)``.

:meth:`InputPreprocessing.missing` names what is unknown; apps warn about it (a model
compiled without mean/std silently gives wrong labels otherwise). Models compiled before
this record existed are read from their recorded compile options where possible.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..types import OptionError

_log = logging.getLogger(__name__)

KEY = "preprocessing"
POLICIES = ("crop", "letterbox", "stretch")
COLOUR_ORDERS = ("RGB", "BGR")
#: torchvision's Resize(256) + CenterCrop(224): the crop keeps 224/256 of the short side.
DEFAULT_CROP_FRACTION = 0.875
#: The letterbox border most detectors are trained with (YOLO's grey).
DEFAULT_FILL = 114

Triple = tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class ResizePolicy:
    """How a photo becomes the model's input size.

    ``crop``: resize the short side to ``side / crop_fraction``, then centre-crop (the aspect
    ratio is kept, the borders are lost). ``letterbox``: fit the whole photo, centred, the
    border ``fill``. ``stretch``: resize to the input size, aspect ratio not kept.
    """

    policy: str
    crop_fraction: float = DEFAULT_CROP_FRACTION
    fill: int = DEFAULT_FILL

    @classmethod
    def parse(cls, text: Any) -> ResizePolicy:
        """``"crop"``, ``"crop:0.875"``, ``"letterbox"``, ``"letterbox:114"`` or ``"stretch"``."""
        if isinstance(text, ResizePolicy):
            return text
        if not isinstance(text, str):
            raise OptionError(f"resize must be a string such as 'crop:0.875', got {text!r}")
        policy, _, arg = text.strip().lower().partition(":")
        if policy not in POLICIES or (policy == "stretch" and arg):
            raise OptionError(
                f"resize must be 'crop[:FRACTION]', 'letterbox[:FILL]' or 'stretch', got {text!r}"
            )
        if policy == "crop":
            fraction = _number(arg, DEFAULT_CROP_FRACTION, text)
            if not 0.0 < fraction <= 1.0:
                raise OptionError(f"resize {text!r}: the crop fraction must be in (0, 1]")
            return cls("crop", crop_fraction=fraction)
        if policy == "letterbox":
            fill = _number(arg, DEFAULT_FILL, text)
            if fill != int(fill) or not 0 <= fill <= 255:
                raise OptionError(f"resize {text!r}: the fill must be a pixel value 0..255")
            return cls("letterbox", fill=int(fill))
        return cls("stretch")

    def short_side(self, crop: int) -> int:
        """The short side to resize to before a ``crop`` x ``crop`` centre crop."""
        return round(crop / self.crop_fraction)

    def __str__(self) -> str:
        if self.policy == "crop":
            return f"crop:{self.crop_fraction:g}"
        if self.policy == "letterbox":
            return f"letterbox:{self.fill}"
        return "stretch"


@dataclass(frozen=True, slots=True)
class InputPreprocessing:
    """A compiled model's recorded preprocessing (see the module docstring)."""

    mean: Triple | None = None
    std: Triple | None = None
    colour_order: str | None = None
    resize: ResizePolicy | None = None
    normalization: str | None = None  # "graph" | "host" | None (unknown)
    resize_in: str = "host"  # "host" | "graph"
    frame: tuple[int, int] | None = None

    def missing(self) -> list[str]:
        """What an application would have to guess: ``mean/std``, ``colour order``,
        ``resize policy``."""
        gaps = []
        if self.normalization is None or self.mean is None or self.std is None:
            gaps.append("mean/std")
        if self.colour_order is None:
            gaps.append("colour order")
        if self.resize is None:
            gaps.append("resize policy")
        return gaps

    def to_json(self) -> dict[str, Any]:
        resize = None
        if self.resize is not None:
            resize = {
                "policy": self.resize.policy,
                "crop_fraction": self.resize.crop_fraction,
                "fill": self.resize.fill,
            }
        return {
            "mean": None if self.mean is None else list(self.mean),
            "std": None if self.std is None else list(self.std),
            "colour_order": self.colour_order,
            "resize": resize,
            "normalization": self.normalization,
            "resize_in": self.resize_in,
            "frame": None if self.frame is None else list(self.frame),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InputPreprocessing:
        """The record back; raises ``ValueError``/``TypeError``/``KeyError`` on bad data."""
        resize = data.get("resize")
        policy = None
        if resize is not None:
            policy = ResizePolicy(
                str(resize["policy"]), float(resize["crop_fraction"]), int(resize["fill"])
            )
            if policy.policy not in POLICIES:
                raise ValueError(f"unknown resize policy {policy.policy!r}")
        order = data.get("colour_order")
        if order is not None and order not in COLOUR_ORDERS:
            raise ValueError(f"unknown colour order {order!r}")
        normalization = data.get("normalization")
        if normalization not in (None, "graph", "host"):
            raise ValueError(f"unknown normalization {normalization!r}")
        frame = data.get("frame")
        return cls(
            mean=_triple(data.get("mean")),
            std=_triple(data.get("std")),
            colour_order=order,
            resize=policy,
            normalization=normalization,
            resize_in="graph" if data.get("resize_in") == "graph" else "host",
            frame=None if frame is None else (int(frame[0]), int(frame[1])),
        )


def _check_graph_resize(frame: tuple[int, int], model_size: tuple[int, int]) -> None:
    """Shrinking in the graph by 2x or more: slower than on the host.

    The graph's resize is PIL's filter as fixed taps (see ._resample), the same on every
    engine. Measured (640x640 RGBx frame -> 224x224, one thread, CPU time on a loaded 2-core
    VM): 4.1 ms on onnxruntime and OpenVINO alike (ONNX Resize took 3.2 ms antialiased on
    onnxruntime and 2.1 ms on OpenVINO, which ignores ``antialias``: max error 128 levels
    against PIL's filter); copyless.vision's fused host kernel 0.6 ms (AVX-512 EPYC).
    """
    factor = min(frame[0] / model_size[0], frame[1] / model_size[1])
    if factor >= 2.0:
        _log.warning(
            "the graph shrinks %dx%d frames %.1fx to %dx%d: slower than resizing on the host "
            "(copyless.vision); give frames of the model's size when you can",
            frame[1], frame[0], factor, model_size[1], model_size[0],
        )  # fmt: skip


def parse_colour_order(value: Any) -> str | None:
    """``"rgb"``/``"bgr"`` (any case) -> ``"RGB"``/``"BGR"``; None stays None."""
    if value is None:
        return None
    text = str(value).upper()
    if text not in COLOUR_ORDERS:
        raise OptionError(f"colour_order must be 'rgb' or 'bgr', got {value!r}")
    return text


def parse_resize(value: Any) -> ResizePolicy | None:
    """The ``resize`` compile option; None stays None."""
    return None if value is None else ResizePolicy.parse(value)


def record(
    *,
    input_format: str | None,
    mean: Triple | None,
    std: Triple | None,
    colour_order: str | None,
    resize: ResizePolicy | None,
    frame: tuple[int, int] | None,
    model_size: tuple[int, int] | None,
) -> str:
    """The metadata value the compiler stores (JSON text). Logs a warning for frames the
    graph shrinks by 2x or more (see :func:`_check_graph_resize`)."""
    if frame is not None and model_size is not None and frame != model_size:
        _check_graph_resize(frame, model_size)
    normalization = None
    if mean is not None or std is not None:
        normalization = "graph" if input_format is not None else "host"
    pre = InputPreprocessing(
        mean=None if normalization is None else (mean or (0.0, 0.0, 0.0)),
        std=None if normalization is None else (std or (1.0, 1.0, 1.0)),
        colour_order=colour_order,
        resize=resize,
        normalization=normalization,
        resize_in="graph" if frame is not None and frame != model_size else "host",
        frame=frame or model_size,
    )
    return json.dumps(pre.to_json(), sort_keys=True)


def preprocessing_of(metadata: Mapping[str, str]) -> InputPreprocessing:
    """A compiled model's recorded preprocessing (``CompiledModel.metadata``).

    Models compiled before the record existed give what their recorded options tell (the
    mean/std of an ``rgbx`` model; nothing about colour order or resize policy). A record
    that does not parse counts as absent (everything unknown), never as an error.
    """
    text = metadata.get(KEY)
    if text is not None:
        try:
            data = json.loads(text)
            if isinstance(data, dict):
                return InputPreprocessing.from_json(data)
        except (ValueError, TypeError, KeyError, IndexError):
            pass
        return InputPreprocessing()
    return _from_options(metadata.get("options"))


def _from_options(text: str | None) -> InputPreprocessing:
    try:
        options = json.loads(text) if text else {}
    except ValueError:
        options = {}
    if not isinstance(options, dict) or options.get("mean") is None:
        return InputPreprocessing()
    try:
        mean, std = _triple(options.get("mean")), _triple(options.get("std") or (1.0, 1.0, 1.0))
    except (TypeError, ValueError):
        return InputPreprocessing()
    folded = options.get("input_format") is not None
    return InputPreprocessing(mean=mean, std=std, normalization="graph" if folded else "host")


def _triple(value: Any) -> Triple | None:
    if value is None:
        return None
    items = [float(v) for v in value]
    if len(items) != 3 or not all(math.isfinite(v) for v in items):
        raise ValueError(f"expected three finite numbers, got {value!r}")
    return (items[0], items[1], items[2])


def _number(arg: str, default: float, text: str) -> float:
    if not arg:
        return default
    try:
        value = float(arg)
    except ValueError:
        raise OptionError(f"resize {text!r}: {arg!r} is not a number") from None
    if not math.isfinite(value):
        raise OptionError(f"resize {text!r}: {arg!r} is not a finite number")
    return value
