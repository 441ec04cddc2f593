"""Preparing photos the way a compiled model recorded it (see copyless.model's preprocessing
record).

:func:`preparer_for` reads the runner's model record and the input tensor's view and returns
a :class:`Preparer`: it decodes a photo at the smallest libjpeg-turbo DCT scale that still
covers what the resize policy needs (so the fused kernel resizes less), writes one frame into
the input tensor in one fused pass (crop, letterbox or stretch; RGB or BGR), and normalises
in place when the record says the host must. What the record lacks is filled with the
task's usual choices (:func:`copyless.model.usual_preprocessing`: RGB; torchvision's crop for
a classifier, a stretch for torchvision's detectors and segmenters, a letterbox for a YOLO;
else a classifier's; mean/std left to the model) and named in :attr:`Preparer.assumed`, for
the app's warning.

The one owner of "a photo into a model's input, as the model recorded it": the apps, the
benchmarks and copyless-serve's encoded-image inputs all go through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..memory import NpuTensor
from ..model import (
    InputPreprocessing,
    ResizePolicy,
    preprocessing_of,
    record_of,
    usual_preprocessing,
)
from ..runner import Runner
from ..types import LayoutError, NpuTensorInfo, UnsupportedError
from ._decode import DECODE_HEADROOM, ImageSource, decode
from ._detections import Placement
from ._formats import ColourFormat, colour_format_for
from ._gpu import DeviceImage
from ._preprocess import Letterbox, classify_preprocess, letterbox, stretch

__all__ = ["DEFAULT_ORDER", "DEFAULT_RESIZE", "Preparer", "preparer_for"]

#: What the app assumes for what the model did not record.
DEFAULT_RESIZE = ResizePolicy("crop")
DEFAULT_ORDER = "RGB"


@dataclass(frozen=True, slots=True)
class Preparer:
    """Photo -> one frame of the model's input (see the module docstring).

    ``height`` x ``width`` is the input frame; ``colour`` the format written, every one the
    compiler writes: packed RGBX/BGRX (uint8), RGBX_FP16, RGBX_BF16; planar RGBP (uint8),
    RGBP_FP16, RGBP_FLOAT (also the CPU view). ``normalize`` is ``(mean, std)``
    when the host applies them (in place, after the fused pass); ``assumed`` names what the
    model did not record (empty when the record is complete).
    """

    height: int
    width: int
    colour: ColourFormat
    policy: ResizePolicy
    bgr: bool
    normalize: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]] | None
    assumed: tuple[str, ...]

    def decode(self, source: ImageSource) -> npt.NDArray[np.uint8]:
        """Decode ``source`` (path or bytes) no smaller than the resize needs; JPEGs at a
        reduced DCT scale only while the result keeps ``DECODE_HEADROOM`` (2x) that size, so
        the resize's filter, not the DCT's, makes the pixels (PIL's answers)."""
        return decode(source, min_size=self.min_decode_size())

    def min_decode_size(self) -> tuple[int, int]:
        """``(min_height, min_width)`` the decoded photo needs for this policy, times
        ``DECODE_HEADROOM``.

        crop: a short side of at least the resize's short side; stretch: the frame; letterbox:
        both sides at least the canvas side (conservative: the long side alone would do).
        """
        if self.policy.policy == "crop":
            side = self.policy.short_side(min(self.height, self.width))
            return side * DECODE_HEADROOM, side * DECODE_HEADROOM
        if self.policy.policy == "letterbox":
            side = max(self.height, self.width) * DECODE_HEADROOM
            return side, side
        return self.height * DECODE_HEADROOM, self.width * DECODE_HEADROOM

    def __call__(
        self,
        image: npt.NDArray[np.uint8],
        tensor: NpuTensor,
        batch_index: int = 0,
        source_size: tuple[int, int] | None = None,
    ) -> Letterbox:
        """Write frame ``batch_index`` of ``tensor`` from ``image``; returns where the photo
        landed (the identity placement for crop and stretch: boxes in frame pixels).

        ``source_size`` is the photo's full ``(height, width)`` when ``image`` was decoded
        smaller: a letterbox placement then maps back to the full photo's pixels."""
        fmt = ColourFormat.BGRX if self.bgr and self.colour is ColourFormat.RGBX else self.colour
        size = self.height
        if self.policy.policy == "letterbox":
            placed = letterbox(image, tensor, colour_format=fmt, size=size,
                               fill=self.policy.fill, batch_index=batch_index)  # fmt: skip
            if source_size is not None and source_size[1] != placed.width:
                height, width = source_size
                scale = placed.scale * placed.width / width
                placed = Letterbox(scale, placed.pad_x, placed.pad_y, width, height, size)
        elif self.policy.policy == "crop":
            classify_preprocess(image, tensor, colour_format=fmt, crop=size,
                                resize_short=self.policy.short_side(size),
                                batch_index=batch_index)  # fmt: skip
            placed = Letterbox(1.0, 0, 0, size, size, size)
        else:
            stretch(image, tensor, colour_format=fmt, batch_index=batch_index)
            placed = Letterbox(1.0, 0, 0, self.width, self.height, max(self.height, self.width))
        if self.colour is not ColourFormat.RGBX and (self.bgr or self.normalize is not None):
            frame = tensor.numpy()[batch_index]
            self._finish(frame if self.colour.planar else frame.transpose(2, 0, 1))
        return placed

    def to_photo(self, placed: Letterbox, size: tuple[int, int]) -> Placement:
        """Where the photo of ``size`` (H, W) lies in the frame, for mapping outputs back
        (:func:`copyless.vision.to_image`, :func:`copyless.vision.mask_to_image`): the
        letterbox :meth:`__call__` returned, a crop as a letterbox with negative pads (the
        torchvision geometry), a stretch as its ``(sx, sy)``."""
        height, width = size
        if self.policy.policy == "letterbox":
            return placed
        if self.policy.policy == "stretch":
            return (width / self.width, height / self.height)
        scale = self.policy.short_side(self.height) / min(height, width)
        pad_x = round((self.width - width * scale) / 2)
        pad_y = round((self.height - height * scale) / 2)
        return Letterbox(scale, pad_x, pad_y, width, height, self.height)

    def writer(
        self,
        image: npt.NDArray[np.uint8],
        tensor: NpuTensor,
        source_size: tuple[int, int] | None = None,
    ) -> Callable[[], Letterbox]:
        """The apps' timed preprocess: ``image`` into frame 0 of ``tensor`` on each call.

        For device memory (``--device cuda``) the image is uploaded once here and each call
        resamples it on the GPU (crop and letterbox, RGB, normalisation in the graph: what the
        GPU kernel writes); the call waits for the GPU so that the time is preprocessing's.
        """
        memory = tensor.device_memory
        if memory is None:
            return lambda: self(image, tensor, 0, source_size)
        if self.policy.policy == "stretch" or self.bgr or self.normalize is not None:
            raise UnsupportedError(
                f"preprocessing on the GPU writes crops and letterboxes of RGB pixels; this "
                f"model records {self.policy}, {'BGR' if self.bgr else 'RGB'}"
                f"{', host normalisation' if self.normalize is not None else ''}"
            )
        gpu = DeviceImage(image, memory.device_id)

        def on_gpu() -> Letterbox:
            size = self.height
            if self.policy.policy == "letterbox":
                placed = gpu.letterbox(tensor, size=size, fill=self.policy.fill)
            else:
                gpu.classify(tensor, resize_short=self.policy.short_side(size), crop=size)
                placed = Letterbox(1.0, 0, 0, size, size, size)
            gpu.synchronize()  # timed as preprocessing; the runner needs no host wait
            return placed

        return on_gpu

    def _finish(self, planes: npt.NDArray[Any]) -> None:
        """Channel order (formats other than RGBX/BGRX, which the kernel writes in either
        order) and host normalisation of one frame's channels ``[C, H, W]``, in place."""
        if self.bgr:
            planes[[0, 2]] = planes[[2, 0]]  # two planes swapped: the one copy BGR costs
        if self.normalize is not None:
            mean, std = self.normalize
            np.subtract(planes, mean, out=planes)
            np.divide(planes, std, out=planes)


def preparer_for(runner: Runner, info: NpuTensorInfo) -> Preparer:
    """The :class:`Preparer` for input ``info`` of ``runner``'s model (see the module docstring).

    Raises :class:`~copyless.LayoutError` for an input no photo can be written into, or
    a frame that is not square where the policy needs a square one (crop, letterbox).
    """
    record = preprocessing_of(runner.model.metadata)
    usual = usual_preprocessing(record_of(runner.model).head) or (DEFAULT_ORDER, "")
    colour = colour_format_for(info)
    packed = not colour.planar
    height, width = (info.shape[1], info.shape[2]) if packed else (info.shape[2], info.shape[3])
    policy = record.resize or (ResizePolicy.parse(usual[1]) if usual[1] else DEFAULT_RESIZE)
    if policy.policy != "stretch" and height != width:
        raise LayoutError(
            f"the {policy} resize needs a square input; {info.describe()} is {width}x{height}"
        )
    return Preparer(
        height=height,
        width=width,
        colour=colour,
        policy=policy,
        bgr=(record.colour_order or usual[0]) == "BGR",
        normalize=_host_normalization(record, colour),
        assumed=tuple(record.missing()),
    )


def _host_normalization(
    record: InputPreprocessing, colour: ColourFormat
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]] | None:
    """``(mean, std)`` when the host normalises: a float CPU view whose model records it
    (a compiled pixel format normalises in the graph)."""
    if colour is not ColourFormat.RGBP_FLOAT or record.normalization != "host":
        return None
    if record.mean is None or record.std is None:
        return None
    shape = (3, 1, 1)
    return (
        np.asarray(record.mean, np.float32).reshape(shape),
        np.asarray(record.std, np.float32).reshape(shape),
    )
