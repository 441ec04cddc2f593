from typing import Any

def regions(
    prob: Any, threshold: float, dilate: bool, /
) -> list[tuple[int, int, int, int, bytes, int]]: ...
def warp(
    src: Any, dst: Any, homographies: Any, sizes: Any, scale: float, offset: float, /
) -> None: ...
