from typing import Any

def resample(
    src: Any,
    dst: Any,
    src_box: tuple[float, float, float, float],
    rect: tuple[int, int, int, int],
    fill: float,
    bgr: bool,
    /,
) -> None: ...
def components(prob: Any, threshold: float, /) -> list[tuple[int, int, int, int, int, float]]: ...
