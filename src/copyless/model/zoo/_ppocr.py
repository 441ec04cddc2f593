"""The PP-OCR models shipped in RapidOCR's wheels (no rebuild, checked copies).

Two generations, each from the package that ships it:

* ``v6`` from ``rapidocr`` 3.x (py3-none-any, any CPython): ``PP-OCRv6_det_small.onnx``,
  ``PP-OCRv6_rec_small.onnx`` (18,708 characters: Chinese, Latin, Japanese, ...) and the
  v2.0 angle classifier ``ch_ppocr_mobile_v2.0_cls_mobile.onnx``;
* ``v4`` from ``rapidocr-onnxruntime`` 1.4.x (CPython <= 3.12): ``ch_PP-OCRv4_det_infer.onnx``,
  ``ch_PP-OCRv4_rec_infer.onnx`` (6,623 characters) and ``ch_ppocr_mobile_v2.0_cls_infer.onnx``.

:func:`preferred_generation` is ``v6`` where ``rapidocr`` is installed, else ``v4``: the zoo's
``ppocr-det``, ``ppocr-rec`` and ``ppocr-cls`` are that generation's; ``ppocr-v4-*`` and
``ppocr-v6-*`` name one generation explicitly.

The classifier's batch dim, stored as the value -1, is made the symbol ``N``.

Models: detector ``x`` float32 ``[N, 3, H, W]`` RGB NCHW (H, W multiples of 32) -> text
probability ``[N, 1, H, W]``; recogniser ``x [N, 3, 48, W]`` -> per-step character
probabilities ``[N, W / 8, C]`` (CTC: class 0 is the blank, the last one a space), its
character list in the ONNX metadata key ``character`` (one per line); classifier
``x [N, 3, 48, 192]`` -> ``[N, 2]`` (upright, upside down). RapidOCR normalises every input
as ``(pixel / 255 - 0.5) / 0.5``; the v4 detector was trained with ImageNet mean/std, which
the zoo's ``ppocr-v4-det`` entry keeps (copyless-detect's record).

The files are found without importing either package (both import OpenCV). Only an IR
version newer than copyless's onnxruntime accepts is lowered.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import onnx

from ...types import ModelLoadError
from ._shipped import shipped_model

__all__ = [
    "BUILD_STEPS",
    "GENERATIONS",
    "PpOcrGeneration",
    "build",
    "installed_generations",
    "preferred_generation",
]

BUILD_STEPS = 2
#: the ONNX metadata key holding a recogniser's characters, one per line
CHARACTER_KEY = "character"

Tick = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class PpOcrGeneration:
    """One generation of PP-OCR models and the package (import name) that ships them."""

    name: str
    package: str
    det: str
    rec: str
    cls: str

    def file(self, role: str) -> str:
        """The package-relative file of ``role`` (``det``, ``rec`` or ``cls``)."""
        return str(getattr(self, role))


GENERATIONS = {
    "v6": PpOcrGeneration(
        "v6",
        "rapidocr",
        "models/PP-OCRv6_det_small.onnx",
        "models/PP-OCRv6_rec_small.onnx",
        "models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
    ),
    "v4": PpOcrGeneration(
        "v4",
        "rapidocr_onnxruntime",
        "models/ch_PP-OCRv4_det_infer.onnx",
        "models/ch_PP-OCRv4_rec_infer.onnx",
        "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
    ),
}


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def installed_generations() -> list[str]:
    """The generations whose package is installed, newest first."""
    return [name for name, gen in GENERATIONS.items() if _installed(gen.package)]


def preferred_generation() -> str:
    """``v6`` where ``rapidocr`` 3.x is installed, else ``v4`` (whose package may be missing
    too: building then says which package to install)."""
    installed = installed_generations()
    return installed[0] if installed else "v4"


def _check_recogniser(model: onnx.ModelProto, where: str) -> None:
    keys = {prop.key: prop.value for prop in model.metadata_props}
    if not keys.get(CHARACTER_KEY, "").strip():
        raise ModelLoadError(
            f"{where} has no character list (ONNX metadata {CHARACTER_KEY!r}); "
            "reinstall the package that ships it"
        )


def build(generation: str, role: str, tick: Tick | None = None) -> bytes:
    """The ONNX bytes of ``role`` (det, rec, cls) of ``generation`` (v4, v6).

    A recogniser without its character list raises :class:`ModelLoadError`.
    Copies: the file is read once; it is re-serialized only when its IR version changes."""
    gen = GENERATIONS[generation]
    relative = gen.file(role)
    check = partial(_check_recogniser, where=f"{relative} in {gen.package}")
    raw = shipped_model(gen.package, relative, tick, check if role == "rec" else None)
    return _symbolic_batch(raw) if role == "cls" else raw


def _symbolic_batch(raw: bytes) -> bytes:
    """The classifier's Paddle export writes its batch dim as the value -1 (not a symbol),
    which no compiler can fix to a batch size: it becomes the symbol ``N``."""
    model = onnx.load_from_string(raw)
    changed = False
    for value in (*model.graph.input, *model.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value < 0:
                dim.dim_param = "N"
                changed = True
    return model.SerializeToString() if changed else raw


def builder(generation: str, role: str) -> Callable[[Tick], bytes]:
    """A zoo builder (``tick -> bytes``) for ``role`` of ``generation``."""
    return partial(build, generation, role)
