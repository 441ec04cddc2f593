"""What a chain of models served as one does with a page: :class:`ChainWork`, the part
:class:`~._chain.ServedChain` (queue, deadlines, cancellation, metrics, lifecycle) leaves
to each kind of chain (:mod:`._chain_ocr`, :mod:`._chain_crops`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..pipeline import Result

__all__ = ["ChainAnswer", "ChainWork"]


@dataclass(frozen=True, slots=True)
class ChainAnswer:
    """One page's outputs by name, and the seconds its stages took (``prepare``,
    ``infer``, ``finish``: what the metrics call compute input, infer and output)."""

    outputs: Mapping[str, np.ndarray]
    stages: Mapping[str, float]


class ChainWork(Protocol):
    """An open chain: the outputs it answers, reading pages in order, closing."""

    #: the chain's output tensors, as metadata reports them
    outputs: tuple[Any, ...]

    def warm(self) -> None:
        """Read one page through every model (compiled and warm); raise on failure."""

    def map(self, pages: Iterator[bytes | memoryview]) -> Iterator[Result]:
        """One :class:`Result` per page, in order; a page that cannot be read is a Result
        with its error (``ValueError``'s message names what is wrong), the others go on."""
        ...

    def answer(self, value: Any) -> ChainAnswer:
        """A Result's value as the chain's outputs."""
        ...

    def close(self) -> None:
        """Release the models (idempotent)."""
