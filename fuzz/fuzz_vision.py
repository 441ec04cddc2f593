"""Coverage-guided fuzzing of the vision kernels (``vision/_kernels.c``, and
``vision/_text.c``'s components) with atheris.

Modes (first byte of the input):

* ``PREPROCESS``: ``classify_preprocess`` / ``letterbox`` from random RGB/RGBX images (1x1
  to 64 pixels a side, odd sizes, strided and reversed sources) into random destinations
  (RGBX/BGRX uint8 NHWC4 or float32 NCHW, batch > 1, destinations that are strided views of
  a larger sentinel-filled array, or raw bytes at an odd, unaligned offset), resize targets
  from 1x1 to larger than the source. Checked against Pillow (``Image.resize`` with the same
  box, per channel in mode ``F``: no 8-bit rounding) and the sentinel around the view.
* ``RESAMPLE``: ``_kernels.resample`` with raw boxes, rects, fills (NaN, inf, negative,
  huge, overflowing sums), and ill-formed buffers. Contract: a ValueError / TypeError /
  OverflowError / BufferError, or the Pillow result inside the rect and ``fill`` around it.
* ``COMPONENTS``: ``_text.components`` and ``text_boxes`` on random probability maps
  (0 to 48 a side, NaN, strided, transposed, unaligned float32), thresholds NaN and inf.
  Checked against ``scipy.ndimage.label`` with 8-connectivity (boxes, counts, sums).
* ``FRAME``: ``classify_frame`` from random 4:2:0 planes (1 to 64 a side, odd sizes; I420,
  NV12's interleaved chroma, padded lines, reversed chroma) with any matrix, range, resize
  and crop into the destinations above. Even heights checked to the bit against swscale's
  arithmetic (numpy) then Pillow's own resize; refusals must come before C.
* ``YUV``: ``_kernels.yuv_resize`` with raw sizes, origins (negative, huge, overflowing),
  coefficients outside int16 and ill-formed planes: refused, or written inside the
  destination only.

Run through ``fuzz/sanitize.py``: ``.venv/bin/python fuzz/sanitize.py fuzz vision``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.ndimage
from PIL import Image

import copyless.vision._frames as frames
import copyless.vision._postprocess as postprocess
import copyless.vision._preprocess as preprocess
from copyless import NpuTensorInfo, TensorDirection, TensorType
from copyless.vision import _kernels, _text
from copyless.vision._formats import ColourFormat


class Guard:
    """Stands in for ``_kernels`` (``_text`` in postprocess) inside the preprocess/postprocess
    modules: counts the C calls, so a refusal can be checked to come from Python, before C
    saw the arguments."""

    def __init__(self) -> None:
        self.calls = 0

    def resample(self, *args: Any) -> None:
        self.calls += 1
        _kernels.resample(*args)

    def components(self, *args: Any) -> Any:
        self.calls += 1
        return _text.components(*args)

    def yuv_resize(self, *args: Any) -> None:
        self.calls += 1
        _kernels.yuv_resize(*args)


GUARD = Guard()
preprocess._kernels = GUARD  # type: ignore[assignment]
postprocess._text = GUARD  # type: ignore[assignment]
frames._kernels = GUARD  # type: ignore[assignment]
SENTINEL = 0xA5
# The formats this harness's references model (packed uint8 within 1 level, planar float32):
# the later RGBP (planar uint8) and FP16/BF16 formats are checked against numpy by
# test_every_compiled_format_is_written_straight_in_its_dtype (tests/vision/).
CHECKED_FORMATS = [ColourFormat.RGBX, ColourFormat.BGRX, ColourFormat.RGBP_FLOAT]
FILLS = [0.0, 114.0, 255.0, -1.0, 256.0, math.nan, math.inf, -0.0, 1e300, 127.5]
EDGES = [0.0, 0.5, 1.0, 1e-9, -1e-9, 1e-6, 2.0**31, math.nan, math.inf, -math.inf]
REFUSED = (ValueError, TypeError, OverflowError, BufferError)


def pick(fdp: Any, lo: int, hi: int, wild: list[Any]) -> Any:
    """Mostly an int in [lo, hi]; one time in eight one of ``wild``."""
    if fdp.ConsumeIntInRange(0, 7) == 0 or hi < lo:
        return fdp.PickValueInList(wild)
    return fdp.ConsumeIntInRange(lo, hi)


def side(fdp: Any) -> int:
    return int(pick(fdp, 1, 24, [1, 2, 3, 63, 64, 97]))


def image(fdp: Any) -> np.ndarray[Any, Any]:
    """A uint8 (H, W, 3|4) image, sometimes a strided or reversed view."""
    h, w, c = side(fdp), side(fdp), fdp.PickValueInList([3, 3, 4])
    rng = np.random.default_rng(fdp.ConsumeIntInRange(0, 2**16))
    base = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    if fdp.ConsumeIntInRange(0, 3) == 0:
        base[...] = fdp.PickValueInList([0, 255])
    view = fdp.ConsumeIntInRange(0, 7)
    if view == 0:  # a column-strided view: preprocess copies it to packed rows
        wide = np.zeros((h, 2 * w, c), np.uint8)
        wide[:, ::2] = base
        return wide[:, ::2]
    if view == 1:
        return np.ascontiguousarray(base[::-1])[::-1]  # negative row stride
    if view == 2:  # padded rows (a decoder's line_size): packed pixels, longer rows
        padded = np.zeros((h, w + 3, c), np.uint8)
        padded[:, :w] = base
        return padded[:, :w]
    return base


def pil_resize(img: np.ndarray[Any, Any], box: tuple[float, ...], ow: int, oh: int) -> Any:
    """(oh, ow, 3) float64 RGB: each channel resized by Pillow in mode F (exact floats)."""
    rgb = np.ascontiguousarray(img[..., :3]).astype(np.float32)
    planes = []
    for k in range(3):
        plane = Image.fromarray(rgb[..., k], "F")
        planes.append(np.asarray(plane.resize((ow, oh), Image.BILINEAR, box=box)))
    return np.stack(planes, -1).astype(np.float64)


def expected(fmt: ColourFormat, img: Any, box: Any, rect: Any, canvas: tuple[int, int],
             fill: float) -> np.ndarray[Any, Any]:  # fmt: skip
    """The (H, W, C) destination image: fill around the rect, Pillow's pixels in it."""
    ox, oy, ow, oh = rect
    chans = 3 if fmt is ColourFormat.RGBP_FLOAT else 4
    out = np.full((*canvas, chans), fill, np.float64)
    inner = pil_resize(img, box, ow, oh)
    out[oy : oy + oh, ox : ox + ow, :3] = inner[..., ::-1] if fmt.bgr else inner
    if chans == 4:
        out[..., 3] = 0.0
    return out


def compare(fmt: ColourFormat, got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    if fmt is ColourFormat.RGBP_FLOAT:
        want = np.minimum(want, 255.0)
        ok = np.allclose(got, want, rtol=1e-4, atol=2e-3, equal_nan=True)
    else:
        ok = bool(np.all(np.abs(got.astype(np.float64) - np.clip(want, 0, 255)) <= 1.0))
    if not ok:
        diff = np.nanmax(np.abs(got.astype(np.float64) - want))
        raise AssertionError(f"{fmt.name}: off by {diff}\n{got[..., 0]}\n{want[..., 0]}")


class Canvas:
    """A destination tensor inside a sentinel-filled allocation (or at an odd offset)."""

    def __init__(self, fdp: Any, fmt: ColourFormat, batch: int, h: int, w: int) -> None:
        self.fmt = fmt
        shape = fmt.image_shape(batch, h, w)
        dtype = np.dtype(np.float32 if fmt is ColourFormat.RGBP_FLOAT else np.uint8)
        self.info = NpuTensorInfo("image", fmt.data_type, TensorDirection.INPUT, TensorType.HW
                                  if fmt is not ColourFormat.RGBP_FLOAT else TensorType.CPU,
                                  fmt.memory_layout, shape)  # fmt: skip
        kind = fdp.ConsumeIntInRange(0, 3)
        if kind == 0:  # raw bytes at an odd offset: an unaligned float32 destination
            self.memory = np.full(self.info.size_in_bytes + 1, SENTINEL, np.uint8)
            self.buffer: Any = self.memory[1:]
            self.array = self.buffer.view(dtype).reshape(shape)
        elif kind == 1:  # a strided view of a larger array with a margin on every side
            big = tuple(d + 2 for d in shape)
            self.memory = np.full(int(np.prod(big)) * dtype.itemsize, SENTINEL, np.uint8)
            outer = self.memory.view(dtype).reshape(big)
            self.array = outer[tuple(slice(1, -1) for _ in shape)]
            self.buffer = self.array
        else:
            self.memory = np.full(self.info.size_in_bytes, SENTINEL, np.uint8)
            self.array = self.memory.view(dtype).reshape(shape)
            self.buffer = self.array
        self.before = self.memory.copy()
        self.written = np.zeros(self.memory.shape, bool)

    def image(self, index: int) -> np.ndarray[Any, Any]:
        one = self.array[index]
        return one.transpose(1, 2, 0) if self.fmt is ColourFormat.RGBP_FLOAT else one

    def mark(self, index: int) -> None:
        """Record the bytes of image ``index`` as written."""
        view = self.image(index)
        start = view.__array_interface__["data"][0] - self.memory.ctypes.data
        idx = np.indices(view.shape).reshape(3, -1)
        offsets = start + np.asarray(view.strides) @ idx
        for b in range(view.itemsize):
            self.written[offsets + b] = True

    def untouched_elsewhere(self) -> None:
        if not np.array_equal(self.memory[~self.written], self.before[~self.written]):
            raise AssertionError("wrote outside the destination image")


def check_preprocess(fdp: Any) -> None:
    img = image(fdp)
    fmt = fdp.PickValueInList(CHECKED_FORMATS)
    batch = fdp.ConsumeIntInRange(1, 3)
    index = pick(fdp, 0, batch - 1, [-1, batch, True])
    if fdp.ConsumeBool():
        resize_short = pick(fdp, 1, 40, [0, -1, 97])
        crop = pick(fdp, 1, 40, [0, -1, resize_short, resize_short + 1])
        canvas = Canvas(fdp, fmt, batch, max(crop, 1), max(crop, 1))
        dst = (canvas.buffer, canvas.info)
        calls = GUARD.calls
        try:
            preprocess.classify_preprocess(img, dst, colour_format=fmt, resize_short=resize_short,
                                           crop=crop, batch_index=index)  # fmt: skip
        except (ValueError, IndexError) as exc:
            if 0 < crop <= resize_short and 0 <= index < batch and index is not True:
                raise AssertionError(f"refused a valid call: {exc}") from exc
            if GUARD.calls != calls:
                raise AssertionError(f"C saw the arguments before the refusal: {exc}") from exc
            return
        box, rect, fill = classify_geometry(img, resize_short, crop), (0, 0, crop, crop), 0.0
        size = (crop, crop)
    else:
        size_ = pick(fdp, 1, 40, [0, -1, 97])
        fill = pick(fdp, 0, 255, [-1, 256, 114])
        canvas = Canvas(fdp, fmt, batch, max(size_, 1), max(size_, 1))
        dst = (canvas.buffer, canvas.info)
        calls = GUARD.calls
        try:
            lb = preprocess.letterbox(img, dst, colour_format=fmt, size=size_, fill=fill,
                                      batch_index=index)  # fmt: skip
        except (ValueError, IndexError) as exc:
            if size_ > 0 and 0 <= fill <= 255 and 0 <= index < batch and index is not True:
                raise AssertionError(f"refused a valid call: {exc}") from exc
            if GUARD.calls != calls:
                raise AssertionError(f"C saw the arguments before the refusal: {exc}") from exc
            return
        h, w = img.shape[:2]
        new_w = min(size_, max(1, round(w * lb.scale)))
        new_h = min(size_, max(1, round(h * lb.scale)))
        box, rect, size = (0.0, 0.0, float(w), float(h)), (lb.pad_x, lb.pad_y, new_w, new_h), (
            size_, size_)  # fmt: skip
    canvas.mark(index)
    canvas.untouched_elsewhere()
    compare(fmt, canvas.image(index), expected(fmt, img, box, rect, size, float(fill)))


def classify_geometry(img: Any, resize_short: int, crop: int) -> tuple[float, ...]:
    """torchvision's Resize(resize_short) + CenterCrop(crop) as a source box."""
    height, width = img.shape[:2]
    if width <= height:
        new_w, new_h = resize_short, int(resize_short * height / width)
    else:
        new_w, new_h = int(resize_short * width / height), resize_short
    left, top = round((new_w - crop) / 2.0), round((new_h - crop) / 2.0)
    sx, sy = width / new_w, height / new_h
    return (left * sx, top * sy, (left + crop) * sx, (top + crop) * sy)


def check_resample(fdp: Any) -> None:
    img = np.ascontiguousarray(image(fdp))
    fmt = fdp.PickValueInList(CHECKED_FORMATS)
    h, w = side(fdp), side(fdp)
    canvas = Canvas(fdp, fmt, 1, h, w)
    src_h, src_w = img.shape[:2]
    x0 = fdp.ConsumeProbability() * src_w if fdp.ConsumeBool() else fdp.PickValueInList(EDGES)
    y0 = fdp.ConsumeProbability() * src_h if fdp.ConsumeBool() else fdp.PickValueInList(EDGES)
    x1 = x0 + fdp.ConsumeProbability() * (src_w - x0) if fdp.ConsumeBool() else (
        fdp.PickValueInList([src_w, src_w + 1e-7, src_w + 1, *EDGES]))  # fmt: skip
    y1 = y0 + fdp.ConsumeProbability() * (src_h - y0) if fdp.ConsumeBool() else (
        fdp.PickValueInList([src_h, src_h + 1e-7, src_h + 1, *EDGES]))  # fmt: skip
    wild = [-1, 0, 2**31, 2**62, 2**63 - 1, -(2**63)]
    ox, oy = pick(fdp, 0, w - 1, wild), pick(fdp, 0, h - 1, wild)
    ow = pick(fdp, 1, max(1, w - ox) if isinstance(ox, int) and 0 <= ox < w else 1, wild)
    oh = pick(fdp, 1, max(1, h - oy) if isinstance(oy, int) and 0 <= oy < h else 1, wild)
    fill = fdp.PickValueInList(FILLS)
    bgr = fdp.ConsumeBool()
    target = whole = canvas.image(0)
    if fdp.ConsumeIntInRange(0, 15) == 0:
        target = fdp.PickValueInList([target[..., :2], target[None], target.astype(np.float64),
                                      target[:0], np.asarray(b"\0" * 12)])  # fmt: skip
    try:
        _kernels.resample(img, target, (x0, y0, x1, y1), (ox, oy, ow, oh), fill, bgr)
    except REFUSED:
        canvas.untouched_elsewhere()  # nothing marked: nothing may have changed
        return
    if target is not whole:
        raise AssertionError("resample accepted an ill-formed destination")
    if not (0 <= x0 < x1 <= src_w + 1e-6 and 0 <= y0 < y1 <= src_h + 1e-6):
        raise AssertionError(f"accepted box {(x0, y0, x1, y1)} of a {src_w}x{src_h} image")
    if not 0.0 <= fill <= 255.0:
        raise AssertionError(f"accepted fill {fill}")
    canvas.mark(0)
    canvas.untouched_elsewhere()
    box = (x0, y0, min(x1, src_w), min(y1, src_h))
    pil_fmt = fmt
    if fmt is not ColourFormat.RGBP_FLOAT:  # the channel order is the bgr argument's
        pil_fmt = ColourFormat.BGRX if bgr else ColourFormat.RGBX
    want = expected(pil_fmt, img, box, (ox, oy, ow, oh), (h, w), fill)
    if bgr and fmt is ColourFormat.RGBP_FLOAT:
        want[..., :3] = want[..., 2::-1]
    compare(fmt, canvas.image(0), want)


def prob_map(fdp: Any) -> np.ndarray[Any, Any]:
    h, w = pick(fdp, 1, 24, [0, 48]), pick(fdp, 1, 24, [0, 48])
    rng = np.random.default_rng(fdp.ConsumeIntInRange(0, 2**16))
    values = rng.random((h, w), dtype=np.float32)
    if values.size and fdp.ConsumeBool():
        values[rng.random((h, w)) < 0.05] = np.nan
    kind = fdp.ConsumeIntInRange(0, 4)
    if kind == 0:
        return values.T  # column-major strides
    if kind == 1:  # unaligned float32 over raw bytes
        raw = np.zeros(values.nbytes + 1, np.uint8)
        raw[1:] = values.view(np.uint8).reshape(-1)
        return raw[1:].view(np.float32).reshape(values.shape)
    if kind == 2:
        return values[::-1, ::2]
    return values


def reference_components(prob: np.ndarray[Any, Any], thr: float) -> list[tuple[Any, ...]]:
    with np.errstate(invalid="ignore"):
        mask = prob > np.float32(thr)
    if mask.size == 0:
        return []
    labels, _ = scipy.ndimage.label(mask, structure=np.ones((3, 3), int))
    out = []
    for k, sl in enumerate(scipy.ndimage.find_objects(labels), start=1):
        sel = labels == k
        out.append((sl[1].start, sl[0].start, sl[1].stop, sl[0].stop, int(sel.sum()),
                    float(prob[sel].astype(np.float64).sum())))  # fmt: skip
    return out


def check_components(fdp: Any) -> None:
    prob = prob_map(fdp)
    thr = fdp.PickValueInList([0.3, 0.5, 0.0, -1.0, 0.99, math.nan, math.inf, -math.inf, 1e-40])
    if fdp.ConsumeIntInRange(0, 15) == 0:
        bad = fdp.PickValueInList([prob.astype(np.float64), prob[None], np.zeros(3, np.float32),
                                   b"abcd", prob.astype(np.float16)])  # fmt: skip
        try:
            _text.components(bad, thr)
        except REFUSED:
            return
        raise AssertionError("components accepted an ill-formed map")
    got = _text.components(prob, thr)
    want = reference_components(prob, thr)
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} components, scipy finds {len(want)}")
    for g, r in zip(sorted(got), sorted(want), strict=True):
        if g[:5] != r[:5] or not math.isclose(g[5], r[5], rel_tol=1e-9, abs_tol=1e-9):
            raise AssertionError(f"component {g} != scipy's {r}")
    if prob.size and fdp.ConsumeBool():  # the public wrapper over the same kernel
        size = fdp.ConsumeIntInRange(1, 64)
        lb = preprocess.Letterbox(1.0, 0, 0, size, size, size)
        boxes = postprocess.text_boxes(prob[None, None], lb, threshold=thr if thr == thr else 0.3)
        for box in boxes:
            if not (0 <= box.x0 < box.x1 <= size and 0 <= box.y0 < box.y1 <= size):
                raise AssertionError(f"box {box} outside the {size}x{size} image")


def sws_rgb(y: Any, u: Any, v: Any, coeffs: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """swscale's yuv420p -> rgb24 fast path in numpy (pmulhw: floor of the product / 2^16)."""
    cy, vr, ub, vg, ug, yoff = coeffs
    h, w = y.shape
    up = np.repeat(np.repeat(u.astype(np.int64), 2, 0), 2, 1)[:h, :w] * 8 - 1024
    vp = np.repeat(np.repeat(v.astype(np.int64), 2, 0), 2, 1)[:h, :w] * 8 - 1024
    yv = (y.astype(np.int64) * 8 - yoff + 32768) % 65536 - 32768  # psubw wraps
    luma = (yv * cy) >> 16
    r = luma + ((vp * vr) >> 16)
    g = luma + ((up * ug) >> 16) + ((vp * vg) >> 16)
    b = luma + ((up * ub) >> 16)
    return np.clip(np.stack([r, g, b], -1), 0, 255).astype(np.uint8)


def yuv_planes(fdp: Any, h: int, w: int) -> tuple[tuple[Any, ...], Any, Any, Any]:
    """Random planes as the decoder might hand them over, and the compact Y, U, V."""
    rng = np.random.default_rng(fdp.ConsumeIntInRange(0, 2**16))
    ch, cw = (h + 1) // 2, (w + 1) // 2
    y = rng.integers(0, 256, (h, w), dtype=np.uint8)
    u = rng.integers(0, 256, (ch, cw), dtype=np.uint8)
    v = rng.integers(0, 256, (ch, cw), dtype=np.uint8)
    if fdp.ConsumeIntInRange(0, 3) == 0:
        y[...] = fdp.PickValueInList([0, 255])
    layout = fdp.ConsumeIntInRange(0, 4)
    if layout == 1:  # NV12
        return (y, np.stack([u, v], -1)), y, u, v
    if layout == 2:  # padded lines
        yp = np.zeros((h, w + 13), np.uint8)
        yp[:, :w] = y
        cp = np.zeros((ch, 2 * cw + 9), np.uint8)
        cp[:, :cw], cp[:, cw + 1 : 2 * cw + 1] = u, v
        return (yp[:, :w], cp[:, :cw], cp[:, cw + 1 : 2 * cw + 1]), y, u, v
    if layout == 3:  # reversed chroma, strided luma: the wrapper copies them
        wide = np.zeros((h, 2 * w), np.uint8)
        wide[:, ::2] = y
        return (wide[:, ::2], u[::-1][::-1], np.ascontiguousarray(v[:, ::-1])[:, ::-1]), y, u, v
    return (y, u, v), y, u, v


def check_frame(fdp: Any) -> None:
    h, w = side(fdp), side(fdp)
    planes, y, u, v = yuv_planes(fdp, h, w)
    fmt = fdp.PickValueInList(CHECKED_FORMATS)
    batch = fdp.ConsumeIntInRange(1, 3)
    index = pick(fdp, 0, batch - 1, [-1, batch])
    short = pick(fdp, 1, 40, [0, -1, 97])
    crop = pick(fdp, 1, 40, [0, -1, short, short + 1])
    matrix = fdp.PickValueInList(["bt601", "bt709", "bt601", "bt2020"])
    yuv_range = fdp.PickValueInList(["limited", "full", "limited", "tv"])
    canvas = Canvas(fdp, fmt, batch, max(crop, 1), max(crop, 1))
    calls = GUARD.calls
    try:
        frames.classify_frame(planes, (canvas.buffer, canvas.info), yuv_matrix=matrix,
                              yuv_range=yuv_range, colour_format=fmt, resize_short=short,
                              crop=crop, batch_index=index)  # fmt: skip
    except (ValueError, IndexError) as exc:
        valid = matrix != "bt2020" and yuv_range != "tv" and 0 < crop <= short
        if valid and 0 <= index < batch:
            raise AssertionError(f"refused a valid call: {exc}") from exc
        if GUARD.calls != calls:
            raise AssertionError(f"C saw the arguments before the refusal: {exc}") from exc
        return
    canvas.mark(index)
    canvas.untouched_elsewhere()
    if h % 2:  # swscale's general scaler: not modelled here
        return
    rgb = Image.fromarray(sws_rgb(y, u, v, frames.swscale_coefficients(matrix, yuv_range)))
    (rw, rh), (left, top) = preprocess.resize_crop(w, h, short, crop)
    want = np.asarray(rgb.resize((rw, rh), Image.BILINEAR).crop((left, top, left + crop,
                                                                 top + crop)))  # fmt: skip
    got = canvas.image(index)[..., :3]
    if fmt.bgr:
        got = got[..., ::-1]
    if not np.array_equal(got.astype(np.float64), want.astype(np.float64)):
        raise AssertionError(f"{fmt.name} {w}x{h} -> {rw}x{rh} at {left},{top}: not PIL's pixels")


def check_yuv(fdp: Any) -> None:
    h, w = side(fdp), side(fdp)
    planes, *_ = yuv_planes(fdp, h, w)
    if len(planes) == 2:
        planes = (planes[0], planes[1][..., 0], planes[1][..., 1])
    fmt = fdp.PickValueInList(CHECKED_FORMATS)
    ch, cw = side(fdp), side(fdp)
    canvas = Canvas(fdp, fmt, 1, ch, cw)
    wild = [-1, 0, 2**16, 2**16 + 1, 2**31, 2**63 - 1, -(2**63)]
    size = (pick(fdp, cw, 3 * cw, wild), pick(fdp, ch, 3 * ch, wild))
    origin = (pick(fdp, 0, 2 * cw, wild), pick(fdp, 0, 2 * ch, wild))
    coeffs = list(frames.swscale_coefficients())
    if fdp.ConsumeIntInRange(0, 7) == 0:
        coeffs[fdp.ConsumeIntInRange(0, 5)] = fdp.PickValueInList(
            [-32768, 32767, -32769, 32768, 2**40, -(2**62)])  # fmt: skip
    target = canvas.image(0)
    args = list(planes)
    if fdp.ConsumeIntInRange(0, 15) == 0:
        k = fdp.ConsumeIntInRange(0, 3)
        bad = [args[0].astype(np.float32), args[0][None], args[0][:, :0], b"abcd"]
        if k < 3:
            args[k] = fdp.PickValueInList(bad)
        else:
            target = fdp.PickValueInList([target[..., :2], target[None], target.astype(np.float64)])
    order, bgr = fdp.ConsumeBool(), fdp.ConsumeBool()
    try:
        _kernels.yuv_resize(*args, target, size, origin, tuple(coeffs), order, bgr)
    except REFUSED:
        canvas.untouched_elsewhere()
        return
    rw, rh = size
    if not (1 <= rw <= 2**16 and 1 <= rh <= 2**16 and 0 <= origin[0] <= rw - cw
            and 0 <= origin[1] <= rh - ch):  # fmt: skip
        raise AssertionError(f"accepted size {size} origin {origin} for a {cw}x{ch} crop")
    if not all(-32768 <= c <= 32767 for c in coeffs):
        raise AssertionError(f"accepted coefficients {coeffs}")
    canvas.mark(0)
    canvas.untouched_elsewhere()


def check(data: bytes) -> None:
    import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]

    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 4)
    (check_preprocess, check_resample, check_components, check_frame, check_yuv)[mode](fdp)


if __name__ == "__main__":
    from harness import main

    import copyless.vision._formats as formats

    main(check, [preprocess, postprocess, formats, frames], check_preprocess, check_resample,
         check_components, check_frame, check_yuv)  # fmt: skip
