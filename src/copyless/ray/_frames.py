"""The decode stage: image paths in, RGBx frames a compiled model binds in place out.

``ds.map_batches(decode_frames, fn_kwargs={"spec": FrameSpec.for_model(model)})`` turns a
``path`` column into ``pixels`` (``[n, size, size, 4]`` RGBx uint8: short side resized to
``resize_short``, centre-cropped, as torchvision's ``Resize`` + ``CenterCrop``) and an
``error`` column ("" when the image decoded). The rest of the preprocessing (the mean/std
normalisation, float conversion, NCHW) is folded into the compiled model
(``input_format="rgbx"``), so a frame is 4 bytes a pixel where a float32 tensor is 12.

JPEGs are decoded by libjpeg-turbo already downscaled (in the DCT) to the smallest size that
still covers twice ``resize_short`` (``vision.DECODE_HEADROOM``: the resize's filter then
dominates, and the frames equal PIL's resize + crop to about a level); the fused
resize/crop kernel writes each frame straight into the batch array. A path with a scheme
(``file://``, ``s3://``...) is read through pyarrow's filesystems. A file that cannot be
read or decoded gives a zero frame and an ``error`` message; the batch goes on.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..model import CompiledModel, ResizePolicy, record_of, usual_preprocessing
from ..types import (
    DataType,
    MemoryLayout,
    NpuTensorInfo,
    TensorDirection,
    TensorType,
    UnsupportedError,
)
from ..vision import (
    DECODE_HEADROOM,
    ColourFormat,
    Placement,
    ReadLimit,
    classify_preprocess,
    decode,
    letterbox,
    stretch,
)

logger = logging.getLogger(__name__)

#: ImageNet's evaluation geometry: Resize(256) then CenterCrop(224).
RESIZE_RATIO = 256 / 224
#: A URI read through pyarrow's filesystems rather than opened as a local path.
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


@dataclass(frozen=True, slots=True)
class FrameSpec:
    """Square RGBx frames of ``size`` pixels, cut from images resized to ``resize_short``;
    an image whose decoding needs more than ``max_image_bytes`` (None: no bound) is an
    error row, read from its header before any pixel is decoded."""

    size: int = 224
    resize_short: int = 256
    max_image_bytes: int | None = None
    #: how an image becomes a frame, as the model's record says: ``"crop"`` (above),
    #: ``"letterbox"`` (the whole image, centred on a ``fill`` border: a YOLO's) or
    #: ``"stretch"`` (resized to the frame, aspect not kept: torchvision's detectors)
    policy: str = "crop"
    fill: int = 114

    def __post_init__(self) -> None:
        if self.policy not in ("crop", "letterbox", "stretch"):
            raise ValueError(f"FrameSpec policy must be crop, letterbox or stretch, got "
                             f"{self.policy!r}")  # fmt: skip
        if not 0 < self.size <= self.resize_short:
            raise ValueError(
                f"FrameSpec needs 0 < size <= resize_short, got {self.size}, {self.resize_short}"
            )

    @classmethod
    def for_model(cls, model: CompiledModel, max_image_bytes: int | None = None) -> FrameSpec:
        """The frames ``model`` takes: its input must be square RGBx (``input_format="rgbx"``).

        Raises :class:`~copyless.UnsupportedError` naming the input otherwise.
        """
        hw = model.inputs[0].hw if len(model.inputs) == 1 else None
        if (
            hw is None
            or hw.data_type is not DataType.UINT8
            or hw.memory_layout is not MemoryLayout.NHWC4
            or len(hw.shape) != 4
            or hw.shape[1] != hw.shape[2]
        ):
            found = ", ".join(spec.hw.describe() for spec in model.inputs)
            raise UnsupportedError(
                f"model {model.name!r} takes {found}; batch classification needs one square "
                "RGBx input (compile with `copyless-compile --input-format rgbx`)"
            )
        size = hw.shape[1]
        record = record_of(model)
        policy = record.preprocessing.resize
        if policy is None:
            usual = usual_preprocessing(record.head)
            policy = ResizePolicy.parse(usual[1]) if usual else None
        if policy is None or policy.policy == "crop":
            fraction = RESIZE_RATIO if policy is None else 1 / policy.crop_fraction
            return cls(size, round(size * fraction), max_image_bytes)
        return cls(size, size, max_image_bytes, policy.policy, policy.fill)

    @property
    def shape(self) -> tuple[int, int, int]:
        """One frame: ``(size, size, 4)``."""
        return (self.size, self.size, 4)

    def info(self, frames: int) -> NpuTensorInfo:
        """The info of ``frames`` such frames (the HW view of an RGBx model input)."""
        return NpuTensorInfo(
            "pixels",
            DataType.UINT8,
            TensorDirection.INPUT,
            TensorType.HW,
            MemoryLayout.NHWC4,
            (frames, *self.shape),
        )


def decode_frames(
    batch: dict[str, npt.NDArray[Any]], spec: FrameSpec = FrameSpec(), column: str = "path"
) -> dict[str, npt.NDArray[Any]]:
    """A ``map_batches`` function: the ``column`` paths of ``batch`` -> ``pixels`` + ``error``.

    Every column of ``batch`` is passed through. Copies: each image is decoded once and
    written once, into its frame of the returned array.
    """
    paths = batch[column]
    frames = np.zeros((len(paths), *spec.shape), np.uint8)
    errors = np.empty(len(paths), dtype=object)
    destination = (frames, spec.info(len(paths)))
    for i, path in enumerate(paths):
        errors[i] = decode_into(path, destination, spec, i)
    return {**batch, "pixels": frames, "error": errors}


def decode_into(path: object, destination: Any, spec: FrameSpec, index: int) -> str:
    """Decode the image at ``path`` into frame ``index`` of ``destination`` (an NpuTensor
    or ``(array, info)``); returns "" or, for an image that cannot be read, why."""
    return decode_placed(path, destination, spec, index)[0]


#: Where an image lies in its frame and the image's ``(height, width)``: for mapping a
#: detector's boxes or a segmenter's mask back to the image (None: a centre crop).
Placed = tuple[Placement, tuple[int, int]] | None


def decode_placed(path: object, destination: Any, spec: FrameSpec, index: int
                  ) -> tuple[str, Placed]:  # fmt: skip
    """:func:`decode_into`, and where the image went (``spec.policy`` letterbox or stretch:
    a :class:`~copyless.vision.Letterbox` or ``(sx, sy)`` with the image's size)."""
    if path is None or not str(path):
        return "no path (an empty row of the manifest)", None
    path = str(path)
    placed: Placed = None
    try:
        source = _read_uri(path) if _SCHEME.match(path) else path
        side = spec.resize_short * DECODE_HEADROOM  # DCT reduction keeps 2x: PIL's answers
        limit = None
        if spec.max_image_bytes is not None:
            limit = ReadLimit(spec.max_image_bytes, "the job gives one image")
        image = decode(source, min_size=(side, side), limit=limit)
        size = (image.shape[0], image.shape[1])
        if spec.policy == "letterbox":
            placed = (letterbox(image, destination, colour_format=ColourFormat.RGBX,
                                size=spec.size, fill=spec.fill, batch_index=index), size)
        elif spec.policy == "stretch":
            placed = (stretch(image, destination, colour_format=ColourFormat.RGBX,
                              batch_index=index), size)  # fmt: skip
        else:
            classify_preprocess(
                image,
                destination,
                colour_format=ColourFormat.RGBX,
                resize_short=spec.resize_short,
                crop=spec.size,
                batch_index=index,
            )
    except (OSError, ValueError) as exc:  # unreadable, missing, not an image
        logger.debug("%s: %s", path, exc)
        return _message(path, exc), None
    return "", placed


def _read_uri(uri: str) -> bytes:
    """The bytes at ``uri`` (``file://``, ``s3://``...), through pyarrow's filesystems."""
    from pyarrow import ArrowException, fs

    try:
        filesystem, path = fs.FileSystem.from_uri(uri)
        with filesystem.open_input_stream(path) as stream:
            data: bytes = stream.read()
    except ArrowException as exc:
        raise OSError(str(exc)) from None
    return data


def _message(path: str, exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{path}: {exc.strerror}"
    text = str(exc)
    return text if path in text else f"{path}: {text}"
