"""The compiler's ``input_format`` values: what the producer of the model's pixels has.

One table, :data:`INPUT_FORMATS`, names every format ``copyless-compile --input-format``
offers, with the HW view it gives the model's image input ``[N, 3, H, W]``:

============== ================================ =========================================
format         HW view (the graph input)        who writes it
============== ================================ =========================================
``rgbx``       UINT8 NHWC4 ``[N, H, W, 4]``     a JPEG decoder, ``classify_preprocess``
``rgbx_fp16``  FP16 NHWC4 ``[N, H, W, 4]``      VART-ML's RGBx_FP16 preprocessing
``rgbx_bf16``  BF16 NHWC4 ``[N, H, W, 4]``      VART-ML's RGBx_BF16 preprocessing
``rgbp``       UINT8 NCHW ``[N, 3, H, W]``      planar RGB (e.g. ``gbrp`` decoders, ISPs)
``rgbp_fp16``  FP16 NCHW ``[N, 3, H, W]``       VART-ML's RGBP_FP16
``rgbp_float`` FLOAT32 NCHW ``[N, 3, H, W]``    VART-ML's RGBP_FLOAT
``i420``       UINT8 Y ``[N, H, W]``, U and V   software video decoders (``yuv420p``)
               ``[N, ceil(H/2), ceil(W/2)]``
``nv12``       UINT8 Y ``[N, H, W]``, UV        hardware video decoders
               ``[N, ceil(H/2), ceil(W/2), 2]``
============== ================================ =========================================

Pixel formats (``rgb*``) carry pixel values in pixel units (0..255, whatever the dtype); the
graph applies ``(x - mean) / std`` (default mean 0, std 1, so already-normalised float
input passes through). YUV formats (``i420``, ``nv12``) are one graph input per plane; the
graph converts to RGB (``yuv_matrix`` BT.601 or BT.709, ``yuv_range`` limited or full)
before the normalisation, so the CPU never converts colours. VART-ML's spellings are
accepted too (``RGBx_FP16``, ``RGBP_FLOAT``, case and ``-``/``_`` do not matter).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..types import DataType, MemoryLayout, OptionError


@dataclass(frozen=True, slots=True)
class InputFormat:
    """One ``input_format``: the HW view's layout and dtype, or its YUV planes."""

    name: str
    memory_layout: MemoryLayout  # NHWC4 (packed), NCHW (planar); planes: NCH per plane
    data_type: DataType
    planes: tuple[str, ...] = ()  # YUV only: the graph input suffixes, in order

    @property
    def yuv(self) -> bool:
        return bool(self.planes)

    @property
    def quantized_pixels(self) -> bool:
        """Integer pixels: the CPU view (float pixels) quantizes to it with scale 1."""
        return self.data_type is DataType.UINT8 and not self.yuv


INPUT_FORMATS: dict[str, InputFormat] = {
    f.name: f
    for f in (
        InputFormat("rgbx", MemoryLayout.NHWC4, DataType.UINT8),
        InputFormat("rgbx_fp16", MemoryLayout.NHWC4, DataType.FP16),
        InputFormat("rgbx_bf16", MemoryLayout.NHWC4, DataType.BF16),
        InputFormat("rgbp", MemoryLayout.NCHW, DataType.UINT8),
        InputFormat("rgbp_fp16", MemoryLayout.NCHW, DataType.FP16),
        InputFormat("rgbp_float", MemoryLayout.NCHW, DataType.FLOAT32),
        InputFormat("i420", MemoryLayout.NCH, DataType.UINT8, ("y", "u", "v")),
        InputFormat("nv12", MemoryLayout.NCH, DataType.UINT8, ("y", "uv")),
    )
}

_ALIASES = {"rgbx_uint8": "rgbx", "rgbp_uint8": "rgbp", "rgbp_fp32": "rgbp_float",
            "rgbp_float32": "rgbp_float", "yuv420p": "i420"}  # fmt: skip

#: ``yuv_matrix`` values: (Kr, Kb) luma coefficients of the colour matrix.
YUV_MATRICES = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}
YUV_RANGES = ("limited", "full")


def input_format(value: object) -> InputFormat | None:
    """The format named ``value`` (None for None); OptionError lists the known names."""
    if value is None:
        return None
    key = str(value).strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in INPUT_FORMATS:
        raise OptionError(
            f"input_format must be one of {', '.join(INPUT_FORMATS)} (or None), got {value!r}"
        )
    return INPUT_FORMATS[key]


def yuv_option(value: object, key: str, choices: tuple[str, ...], default: str) -> str:
    """A ``yuv_matrix`` / ``yuv_range`` value, lower-cased (``BT.709`` reads ``bt709``)."""
    if value is None:
        return default
    text = str(value).strip().lower().replace(".", "").replace("-", "")
    if text not in choices:
        raise OptionError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
    return text


def centre_crop(
    frame: tuple[int, int], model: tuple[int, int], fraction: float, align: int = 1
) -> tuple[int, int, int, int]:
    """``(top, left, height, width)`` of the centred region of a ``frame`` (H, W) that has the
    ``model``'s aspect ratio and ``fraction`` of the largest such region's size.

    ``fraction = 224 / 256`` is torchvision's ``Resize(256)`` + ``CenterCrop(224)`` for a
    square model. ``align = 2`` keeps every edge even (YUV 4:2:0 chroma is subsampled 2x2).
    """
    scale = fraction * min(frame[0] / model[0], frame[1] / model[1])
    sides = []
    for want, have in zip((model[0] * scale, model[1] * scale), frame, strict=True):
        side = min(have, max(align, round(want / align) * align))
        sides.append(side - side % align)
    top = (frame[0] - sides[0]) // 2
    left = (frame[1] - sides[1]) // 2
    return top - top % align, left - left % align, sides[0], sides[1]
