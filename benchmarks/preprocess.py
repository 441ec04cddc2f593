"""Decode + preprocess speed of the vision layer against a plain Pillow + numpy pipeline.

The photo is skimage's chelsea resized to 640x480 and saved as a quality-90 JPEG (or
``--image``). Every case runs once per round, round-robin, so all see the same machine
noise; medians over ``--runs`` rounds are printed, then the ratios that matter:
fused preprocess / decode (the target is about 1x), and plain / fused.

    python benchmarks/preprocess.py            # 200 rounds
    python benchmarks/preprocess.py --runs 50 --image photo.jpg

"plain" is what an app writes without copyless: Pillow decode, Pillow antialiased bilinear
resize, crop, then numpy to pack RGBx / to build planar float32 and copy into the tensor.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import skimage.data
from PIL import Image

import copyless as cl
from copyless.vision import DECODE_HEADROOM, classify_preprocess, decode, letterbox

Array = npt.NDArray[Any]


def tensor(shape: tuple[int, ...], rgbx: bool) -> cl.NpuTensor:
    if rgbx:
        dtype, layout = cl.DataType.UINT8, cl.MemoryLayout.NHWC4
    else:
        dtype, layout = cl.DataType.FLOAT32, cl.MemoryLayout.NCHW
    info = cl.NpuTensorInfo(
        "input", dtype, cl.TensorDirection.INPUT, cl.TensorType.HW, layout, shape
    )
    return cl.NpuTensor(info, np.zeros(shape, dtype.to_numpy()), cl.MemoryType.USER_POINTER_CMA)


def plain_classify(image: Image.Image) -> Array:
    """Pillow resize (short side 256) + centre crop 224: the HxWx3 uint8 crop."""
    w, h = image.size
    size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
    resized = image.resize(size, Image.Resampling.BILINEAR)
    left, top = round((size[0] - 224) / 2), round((size[1] - 224) / 2)
    return np.asarray(resized.crop((left, top, left + 224, top + 224)))


def plain_rgbx(image: Image.Image, dst: Array) -> None:
    crop = plain_classify(image)
    dst[0] = np.concatenate([crop, np.zeros((*crop.shape[:2], 1), np.uint8)], axis=2)


def plain_float(image: Image.Image, dst: Array) -> None:
    dst[0] = plain_classify(image).transpose(2, 0, 1).astype(np.float32)


def plain_letterbox(image: Image.Image, dst: Array) -> None:
    w, h = image.size
    scale = 640 / max(w, h)
    nw, nh = round(w * scale), round(h * scale)
    canvas = np.full((640, 640, 4), 114, np.uint8)
    canvas[..., 3] = 0
    x, y = (640 - nw) // 2, (640 - nh) // 2
    resized = image.resize((nw, nh), Image.Resampling.BILINEAR)
    canvas[y : y + nh, x : x + nw, :3] = np.asarray(resized)
    dst[0] = canvas


def pil_decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data)).convert("RGB")
    image.load()
    return image


def run_all(cases: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Median milliseconds of each case, timed round-robin."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():  # warm up
        fn()
    for _ in range(runs):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="rounds (>= 50 recommended)")
    parser.add_argument("--image", help="a JPEG to use instead of the 640x480 chelsea")
    args = parser.parse_args()
    if args.image:
        with open(args.image, "rb") as f:
            data = f.read()
    else:
        cat = np.asarray(skimage.data.chelsea())
        photo = Image.fromarray(cat).resize((640, 480), Image.Resampling.BILINEAR)
        buf = io.BytesIO()
        photo.save(buf, format="JPEG", quality=90)
        data = buf.getvalue()
    image = decode(data)
    pil_image = pil_decode(data)
    rgbx = tensor((1, 224, 224, 4), True)
    planar = tensor((1, 3, 224, 224), False)
    box = tensor((1, 640, 640, 4), True)
    rgbx_np, planar_np, box_np = rgbx.numpy(), planar.numpy(), box.numpy()

    cases: dict[str, Callable[[], object]] = {
        "decode (libjpeg-turbo)": lambda: decode(data),
        "decode min_size 256": lambda: decode(data, min_size=(256, 256)),
        "fused classify RGBX 224": lambda: classify_preprocess(image, rgbx),
        "fused classify RGBP_FLOAT 224": lambda: classify_preprocess(image, planar),
        "fused letterbox RGBX 640": lambda: letterbox(image, box),
        # as the apps decode: DCT-reduced only while keeping 2x the resize (DECODE_HEADROOM)
        "fused decode+classify RGBX": lambda: classify_preprocess(
            decode(data, min_size=(256 * DECODE_HEADROOM,) * 2), rgbx
        ),
        "plain decode (Pillow)": lambda: pil_decode(data),
        "plain classify RGBX 224": lambda: plain_rgbx(pil_image, rgbx_np),
        "plain classify RGBP_FLOAT 224": lambda: plain_float(pil_image, planar_np),
        "plain letterbox RGBX 640": lambda: plain_letterbox(pil_image, box_np),
        "plain decode+classify RGBX": lambda: plain_rgbx(pil_decode(data), rgbx_np),
    }
    med = run_all(cases, args.runs)
    print(f"image: {image.shape[1]}x{image.shape[0]} JPEG, {len(data)} bytes; "
          f"medians of {args.runs} rounds")
    for name, ms in med.items():
        print(f"  {name:32s} {ms:8.3f} ms")
    dec = med["decode (libjpeg-turbo)"]
    print("ratios:")
    for what in ("classify RGBX 224", "classify RGBP_FLOAT 224", "letterbox RGBX 640"):
        fused, plain = med[f"fused {what}"], med[f"plain {what}"]
        print(f"  {what:26s} fused/decode {fused / dec:5.2f}x   plain/fused {plain / fused:5.2f}x")
    e2e_fused, e2e_plain = med["fused decode+classify RGBX"], med["plain decode+classify RGBX"]
    print(f"  {'decode+classify RGBX':26s} plain/fused {e2e_plain / e2e_fused:5.2f}x")


if __name__ == "__main__":
    main()
