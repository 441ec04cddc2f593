"""What every ``input_format`` fold shares: the frame geometry and the normalisation.

The model's image input is float ``[N, 3, h, w]``. The producer's frame is ``input_size``
``(H, W)`` (default: the model's own), optionally centre-cropped (``input_crop``) to the
model's aspect ratio, then resized to ``h x w``; the pixels are normalised with
``(x - mean) / std`` in pixel units.
"""

from __future__ import annotations

import dataclasses

from ..types import DataType, NpuTensorInfo, UnsupportedError
from ._input_formats import centre_crop
from ._options import CompileOptions

#: ``(resize to (h, w) or None, crop (top, left, height, width) of the frame or None)``
Geometry = tuple[tuple[int, int] | None, tuple[int, int, int, int] | None]


def pixel_geometry(
    cpu: NpuTensorInfo, opts: CompileOptions, align: int = 1
) -> tuple[NpuTensorInfo, Geometry]:
    """The frame's float pixel view ``[N, 3, H, W]`` and how the graph maps it onto ``cpu``.

    ``align = 2`` keeps crop edges even (4:2:0 chroma). UnsupportedError when ``cpu`` is no
    float ``[N, 3, h, w]`` image input.
    """
    if len(cpu.shape) != 4 or cpu.shape[1] != 3 or not cpu.data_type.is_float:
        raise UnsupportedError(
            f"input_format={opts.input_format!r} needs a float [N,3,H,W] input; {cpu.describe()}"
        )
    model = (cpu.shape[2], cpu.shape[3])
    frame = opts.input_size or model
    pixels = dataclasses.replace(cpu, data_type=DataType.FLOAT32, shape=cpu.shape[:2] + frame)
    crop = None
    region = frame
    if opts.input_crop is not None:
        crop = centre_crop(frame, model, opts.input_crop, align)
        region = (crop[2], crop[3])
    return pixels, (model if region != model else None, crop)


def normalization(opts: CompileOptions) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(scale, bias)`` per channel with ``x * scale + bias == (x - mean) / std``."""
    mean, std = opts.mean or (0.0, 0.0, 0.0), opts.std or (1.0, 1.0, 1.0)
    return (
        tuple(1.0 / s for s in std),
        tuple(-m / s for m, s in zip(mean, std, strict=True)),
    )
