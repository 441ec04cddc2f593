from typing import Any

def resample(
    src: Any,
    dst: Any,
    src_box: tuple[float, float, float, float],
    rect: tuple[int, int, int, int],
    fill: float,
    bgr: bool,
    bf16: bool = False,
    /,
) -> None: ...
def yuv_resize(
    y: Any,
    u: Any,
    v: Any,
    dst: Any,
    size: tuple[int, int],
    origin: tuple[int, int],
    coeffs: tuple[int, ...],
    vertical_first: bool,
    bgr: bool,
    bf16: bool = False,
    /,
) -> None: ...
