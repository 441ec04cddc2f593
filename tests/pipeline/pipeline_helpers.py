"""Pipeline test helpers: seeded inputs for the conv net, simple prepare/finish pairs."""

from __future__ import annotations

from typing import Any

import numpy as np

import copyless as cl


def frames(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(count)]


def copy_in(xs: list[np.ndarray]) -> Any:
    """A prepare that writes ``xs[item]`` into the item's input row."""

    def prepare(item: int, inputs: list[cl.NpuTensor]) -> None:
        inputs[0].numpy()[...] = xs[item]

    return prepare


def logits(item: Any, outputs: list[cl.NpuTensor]) -> np.ndarray:
    """A finish that copies the item's logits out (the tensors are reused after it)."""
    return outputs[0].numpy().reshape(-1).copy()
