"""The in-graph resize of decoder frames, computed the same way on every engine.

A frame that is not the model's size (``input_size``, ``input_crop``) is resampled in the
graph. ONNX ``Resize`` cannot do it the same everywhere: onnxruntime honours
``antialias=1`` (PIL's filter), OpenVINO 2026 ignores it and samples plain bilinear, which
aliases when shrinking 2x (the same compiled I420 graph gave the reference's top-1 on
146/150 frames on OpenVINO and 93/150 on onnxruntime). So the resize is written as what it
is, two separable passes of fixed taps: per output row ``Gather`` the ``K`` source rows
it reads and weight them (``MatMul``); then the same over columns (transposed). Every
engine computes that identically (up to float summation order), and it reads ``K``
(5 for a 2x shrink) samples per output sample where a dense matrix would read them all.

The weights are PIL's ``BILINEAR`` (a triangle filter whose support widens with the
reduction, normalised per output sample, clipped at the frame's edges), on the source box of
torchvision's ``Resize(S)`` + ``CenterCrop`` geometry (:func:`source_box`): the same
coordinates as the reference pipeline, no rounding of crop edges. 4:2:0 chroma planes get
the same filter composed with nearest upsampling (each chroma sample covers its 2x2 luma
pixels, as FFmpeg's swscale converts ``yuv420p`` to ``rgb24``), so resizing each plane then
converting equals converting then resizing (the conversion is affine).

Built once at compile time with numpy; no copy at run time beyond the engine's own.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import onnx

from ._graph import NodeChain

Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in frame pixels
Taps = tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]  # [out, K] indices, weights


def source_box(frame: tuple[int, int], model: tuple[int, int], crop: float | None) -> Box:
    """The region of a ``frame`` ``(H, W)`` that becomes the model's ``(h, w)`` input.

    No ``crop``: the whole frame (stretched). ``crop`` (a fraction such as 224/256):
    torchvision's ``Resize(S)`` with ``S = round(min(h, w) / crop)`` (the short side, the
    long one truncated as torchvision does) then ``CenterCrop((h, w))`` (edges rounded in
    the resized image), mapped back to frame pixels. When that crop does not fit the resized
    frame (a model much wider than the frame), the centred region of the model's aspect
    ratio and ``crop`` of the largest such region's size.
    """
    height, width = frame
    if crop is None:
        return 0.0, 0.0, float(width), float(height)
    h, w = model
    short = round(min(h, w) / crop)
    if width <= height:
        new_w, new_h = short, int(short * height / width)
    else:
        new_w, new_h = int(short * width / height), short
    if new_w >= w and new_h >= h:
        left, top = round((new_w - w) / 2.0), round((new_h - h) / 2.0)
        sx, sy = width / new_w, height / new_h
        return left * sx, top * sy, (left + w) * sx, (top + h) * sy
    scale = crop * min(height / h, width / w)
    rw, rh = w * scale, h * scale
    return (width - rw) / 2, (height - rh) / 2, (width + rw) / 2, (height + rh) / 2


def bilinear_weights(size: int, out: int, start: float, end: float) -> npt.NDArray[np.float64]:
    """``[out, size]``: PIL's ``BILINEAR`` resampling of source span ``[start, end)`` of a
    line of ``size`` samples to ``out`` samples (PIL's ``precompute_coeffs``)."""
    scale = (end - start) / out
    filterscale = max(scale, 1.0)
    matrix = np.zeros((out, size))
    for i in range(out):
        centre = start + (i + 0.5) * scale
        lo = max(int(centre - filterscale + 0.5), 0)
        hi = min(int(centre + filterscale + 0.5), size)
        taps = np.arange(lo, hi)
        weights = np.maximum(0.0, 1.0 - np.abs((taps - centre + 0.5) / filterscale))
        total = weights.sum()
        if total > 0:
            matrix[i, lo:hi] = weights / total
        else:  # a span narrower than a sample between two centres: the nearest sample
            matrix[i, min(max(int(centre), 0), size - 1)] = 1.0
    return matrix


def subsampled(weights: npt.NDArray[np.float64], samples: int) -> npt.NDArray[np.float64]:
    """``weights`` over full-resolution positions composed with nearest 2x upsampling of a
    plane of ``samples`` (position ``x`` reads sample ``x // 2``): ``[out, samples]``."""
    up = np.zeros((weights.shape[1], samples))
    positions = np.arange(weights.shape[1])
    up[positions, np.minimum(positions // 2, samples - 1)] = 1.0
    composed: npt.NDArray[np.float64] = weights @ up
    return composed


def taps(matrix: npt.NDArray[np.float64]) -> Taps:
    """A banded ``[out, size]`` matrix as ``K`` taps per output: first index + offsets."""
    size = matrix.shape[1]
    nonzero = matrix != 0
    first = nonzero.argmax(axis=1)
    last = size - 1 - nonzero[:, ::-1].argmax(axis=1)
    k = int((last - first).max()) + 1
    index = np.minimum(first[:, None] + np.arange(k)[None, :], size - 1)
    weight = np.take_along_axis(matrix, index, axis=1)
    beyond = first[:, None] + np.arange(k)[None, :] > last[:, None]
    weight[beyond] = 0.0  # taps past the band (clamped duplicates) weigh nothing
    return index.astype(np.int64), weight.astype(np.float32)


def plane_taps(
    frame: tuple[int, int], model: tuple[int, int], crop: float | None, subsample: int = 1
) -> tuple[Taps, Taps]:
    """``(rows, columns)`` taps resampling a plane of a ``frame`` (H, W) to ``model`` (h, w):
    ``subsample`` 2 for 4:2:0 chroma planes (``ceil(H/2) x ceil(W/2)`` samples)."""
    x0, y0, x1, y1 = source_box(frame, model, crop)
    rows = bilinear_weights(frame[0], model[0], y0, y1)
    cols = bilinear_weights(frame[1], model[1], x0, x1)
    if subsample == 2:
        rows = subsampled(rows, math.ceil(frame[0] / 2))
        cols = subsampled(cols, math.ceil(frame[1] / 2))
    return taps(rows), taps(cols)


def resample(chain: NodeChain, rows: Taps, cols: Taps, *, cast: bool = False) -> None:
    """Append the resize to ``chain``: ``[N, C, H, W]`` -> float ``[N, C, h, w]``.

    First a ``Slice`` to the samples the taps read (the crop; padded decoder lines too),
    then with ``cast`` the ``Cast`` to float (so only those are converted), then the rows:
    ``Gather`` on axis 2 copies whole lines (``[N, C, h, K, W]``), and a ``MatMul`` of each
    output line's ``1 x K`` weights by its ``K x W`` lines sums them; then the same on the
    transposed ``[N, C, W, h]`` for the columns, and back. (A ``Gather`` on the innermost
    axis copies sample by sample: 65 ms for a 640x480 plane on onnxruntime.)"""
    (r_index, r_weight), (c_index, c_weight) = rows, cols
    r0, r1 = int(r_index.min()), int(r_index.max()) + 1
    c0, c1 = int(c_index.min()), int(c_index.max()) + 1
    chain.op("Slice", chain.const([r0, c0], np.int64, "starts"),
             chain.const([r1, c1], np.int64, "ends"),
             chain.const([2, 3], np.int64, "axes"))  # fmt: skip
    if cast:
        chain.op("Cast", to=onnx.TensorProto.FLOAT)
    for index, weight in ((r_index - r0, r_weight), (c_index - c0, c_weight)):
        out, k = index.shape
        chain.op("Gather", chain.const(index.reshape(-1), np.int64, "taps"), axis=2)
        if not (k == 1 and bool((weight == 1.0).all())):  # else whole samples: gathered
            chain.op("Reshape", chain.const([0, 0, out, k, -1], np.int64, "shape"))
            # [out, 1, K] @ [N, C, out, K, W]: per output line a 1 x K by K x W product
            lines = chain.current
            chain.current = chain.const(weight[:, None, :], np.float32, "weights")
            chain.op("MatMul", lines)
            chain.op("Reshape", chain.const([0, 0, out, -1], np.int64, "shape"))
        chain.op("Transpose", perm=[0, 1, 3, 2])
