from collections.abc import Sequence
from typing import Any

MAXD: int

class Plan:
    def __init__(
        self,
        shape: Sequence[int],
        src_strides: Sequence[int],
        dst_strides: Sequence[int],
        src_type: int,
        dst_type: int,
        op: int,
        scale: float,
        zero_point: int,
        toward_zero: bool,
        pad_dim: int,
        cb_dim: int,
        pad_mode: int,
        group: int,
        channels: int,
        pad_value: bytes,
        src_nbytes: int,
        dst_nbytes: int,
    ) -> None: ...
    @property
    def kernel(self) -> str: ...
    def run(self, src: Any, dst: Any, /) -> None: ...
