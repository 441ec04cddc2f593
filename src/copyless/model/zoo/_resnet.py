"""ResNet-50 v1 with deterministic random weights, for performance work (not for labels).

Architecture (He et al. 2015, "v1": the stride of a downsampling bottleneck sits on its first
1x1 convolution): 7x7/2 stem to 64 channels + ReLU, 3x3/2 max pool, bottleneck stages of
[3, 4, 6, 3] blocks with widths 64/128/256/512 (x4 expansion, 1x1 projection shortcut on each
stage's first block), global average pooling, a 1000-way classifier. Batch norm is folded
away, so every convolution carries a bias.

Weights: ``numpy.random.default_rng(0)``, He-normal (``std = sqrt(2 / fan_in)``) for every
convolution, biases ``N(0, 0.01)``; the last convolution of each residual branch is scaled by
0.2 (what a small folded BN gamma does) so activations stay finite through 16 residual adds.
The classifier is ``N(0, 0.01)``. The same numpy version gives byte-identical models.

Model: input ``input`` float32 ``[N, 3, 224, 224]`` (N dynamic) -> ``logits`` ``[N, 1000]``.
Preprocessing for realism: ImageNet mean/std, resize short side 256, centre-crop 224.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx

from ._graph import FloatArray, GraphBuilder

__all__ = ["BUILD_STEPS", "SEED", "build", "build_resnet50"]

SEED = 0
_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, stride)
_EXPANSION = 4
_RESIDUAL_SCALE = 0.2
BUILD_STEPS = sum(blocks for _, blocks, _ in _STAGES) + 2

Tick = Callable[[int], None]


class _Weights:
    """Draws weights in a fixed order from one generator, so the model is reproducible."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def conv(
        self, cout: int, cin: int, k: int, scale: float = 1.0
    ) -> tuple[FloatArray, FloatArray]:
        std = math.sqrt(2.0 / (cin * k * k)) * scale
        weight = self._rng.standard_normal((cout, cin, k, k), dtype=np.float32) * np.float32(std)
        bias = self._rng.standard_normal(cout, dtype=np.float32) * np.float32(0.01)
        return weight, bias

    def linear(self, cout: int, cin: int) -> tuple[FloatArray, FloatArray]:
        weight = self._rng.standard_normal((cout, cin), dtype=np.float32) * np.float32(0.01)
        return weight, np.zeros(cout, dtype=np.float32)


def _bottleneck(g: GraphBuilder, w: _Weights, x: str, cin: int, width: int, stride: int) -> str:
    cout = width * _EXPANSION
    h = g.relu(g.conv(x, *w.conv(width, cin, 1), stride=stride, prefix="conv1x1"))
    h = g.relu(g.conv(h, *w.conv(width, width, 3), prefix="conv3x3"))
    h = g.conv(h, *w.conv(cout, width, 1, _RESIDUAL_SCALE), prefix="conv1x1")
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = g.conv(x, *w.conv(cout, cin, 1), stride=stride, prefix="shortcut")
    return g.relu(g.add(h, shortcut))


def build_resnet50(seed: int = SEED, tick: Tick | None = None) -> onnx.ModelProto:
    """Build ResNet-50 v1 with weights drawn from ``default_rng(seed)`` (about 100 MB)."""
    g = GraphBuilder("resnet50_v1")
    w = _Weights(seed)
    x = g.relu(g.conv("input", *w.conv(64, 3, 7), stride=2, prefix="stem"))
    x = g.max_pool(x, kernel=3, stride=2, pad=1)
    if tick:
        tick(1)
    cin = 64
    for width, blocks, stride in _STAGES:
        for i in range(blocks):
            x = _bottleneck(g, w, x, cin, width, stride if i == 0 else 1)
            cin = width * _EXPANSION
            if tick:
                tick(1)
    x = g.global_avg_pool_flat(x)
    g.gemm(x, *w.linear(1000, cin), "logits")
    model = g.model("input", ["N", 3, 224, 224], "logits", ["N", 1000], __doc__ or "")
    if tick:
        tick(1)
    return model


def build(tick: Tick | None = None) -> onnx.ModelProto:
    """The zoo's builder for ``resnet50`` (seed 0)."""
    return build_resnet50(SEED, tick)
