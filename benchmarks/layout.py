"""Layout conversion speed, as a multiple of memcpy of the same source bytes.

For each frame size and conversion this times ``Plan.run`` (the path the runner takes) and
``np.copyto`` of an array of the source's bytes, alternating the two in one loop so both see
the same machine noise, and prints the medians and their ratio. A plain numpy chain
(transpose + round + clip + astype, with padding) is shown for comparison.

    python benchmarks/layout.py            # 224x224, 640x640, 3840x2160
    python benchmarks/layout.py --repeats 50 --sizes 640x640
    COPYLESS_KERNELS_NO_AVX2=1 python benchmarks/layout.py --sizes 640x640

The fp32 NCHW -> NHWC4 u8 row runs the fused pixel kernel, picked at import: AVX2 where the
CPU has it, else SSE2 (the variable forces SSE2, as on a CPU without AVX2).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from copyless import DataType, MemoryLayout, NpuTensorInfo, QuantParameters, TensorDirection
from copyless import TensorType as TT
from copyless.layout import hw_info_for, plan_for

Q = QuantParameters(1.0, 0)


def cpu_info(h: int, w: int, layout: MemoryLayout = MemoryLayout.NCHW) -> NpuTensorInfo:
    shape = (1, 3, h, w) if layout is MemoryLayout.NCHW else (1, h, w, 3)
    return NpuTensorInfo("x", DataType.FLOAT32, TensorDirection.INPUT, TT.CPU, layout, shape)


def numpy_chain_to_rgbx(src: np.ndarray[Any, Any], dst: np.ndarray[Any, Any]) -> None:
    """The straightforward numpy way: transpose, pad, round, clip, cast (temporaries)."""
    hwc = np.transpose(src[0], (1, 2, 0))
    padded = np.pad(hwc, ((0, 0), (0, 0), (0, 1)))
    np.copyto(dst[0], np.clip(np.rint(padded), 0, 255).astype(np.uint8))


def time_pair(run: Callable[[], None], nbytes: int, repeats: int) -> tuple[float, float]:
    """Median seconds of ``run`` and of a memcpy of ``nbytes``, interleaved."""
    a = np.ones(nbytes, np.uint8)
    b = np.empty_like(a)
    run()
    np.copyto(b, a)
    t_run, t_copy = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        t1 = time.perf_counter()
        np.copyto(b, a)
        t2 = time.perf_counter()
        t_run.append(t1 - t0)
        t_copy.append(t2 - t1)
    return statistics.median(t_run), statistics.median(t_copy)


def cases(h: int, w: int) -> list[tuple[str, Callable[[], None], int]]:
    rng = np.random.default_rng(0)
    nchw = cpu_info(h, w)
    nhwc = cpu_info(h, w, MemoryLayout.NHWC)
    rgbx = hw_info_for(nchw, MemoryLayout.NHWC4, DataType.UINT8)
    hcwn = hw_info_for(nchw, MemoryLayout.HCWNC4, DataType.BF16)
    x = (rng.random(nchw.shape, np.float32) * 255).astype(np.float32)
    x_back = np.empty_like(x)
    u8 = np.empty(rgbx.shape, np.uint8)
    bf = np.empty(hcwn.shape, hcwn.numpy_dtype)
    x_nhwc = np.empty(nhwc.shape, np.float32)
    to_rgbx, from_rgbx = plan_for(nchw, rgbx, Q), plan_for(rgbx, nchw, Q)
    to_bf, from_bf = plan_for(nchw, hcwn), plan_for(hcwn, nchw)
    to_nhwc = plan_for(nchw, nhwc)
    to_rgbx.run(x, u8)
    to_bf.run(x, bf)
    return [
        ("fp32 NCHW -> NHWC4 u8 (quant)", lambda: to_rgbx.run(x, u8), x.nbytes),
        ("  numpy chain, same conversion", lambda: numpy_chain_to_rgbx(x, u8), x.nbytes),
        ("NHWC4 u8 -> fp32 NCHW (dequant)", lambda: from_rgbx.run(u8, x_back), u8.nbytes),
        ("fp32 NCHW -> HCWNC4 bf16", lambda: to_bf.run(x, bf), x.nbytes),
        ("HCWNC4 bf16 -> fp32 NCHW", lambda: from_bf.run(bf, x_back), bf.nbytes),
        ("fp32 NCHW -> NHWC", lambda: to_nhwc.run(x, x_nhwc), x.nbytes),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--sizes", default="224x224,640x640,3840x2160", help="WxH list")
    args = parser.parse_args()
    print(f"{'size':>10}  {'conversion':<34} {'median':>10} {'memcpy':>10} {'x memcpy':>9}")
    for size in args.sizes.split(","):
        w, h = (int(v) for v in size.split("x"))
        for name, run, nbytes in cases(h, w):
            t_run, t_copy = time_pair(run, nbytes, args.repeats)
            print(
                f"{size:>10}  {name:<34} {t_run * 1e3:8.3f}ms {t_copy * 1e3:8.3f}ms "
                f"{t_run / t_copy:8.2f}x"
            )


if __name__ == "__main__":
    main()
