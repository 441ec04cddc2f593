"""A small ONNX graph builder for the zoo's convolutional networks.

Only what the zoo needs: convolutions with folded batch norm, clips, adds, pooling and a
classifier, producing float32 models with ``ir_version`` 10 and opset 17 (what onnxruntime
1.18+ loads). Weights are stored as raw little-endian initializers (one copy into the proto).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["IR_VERSION", "OPSET", "GraphBuilder", "fold_batch_norm"]

IR_VERSION = 10
OPSET = 17

FloatArray = npt.NDArray[np.float32]


def fold_batch_norm(
    weight: npt.NDArray[Any],
    gamma: npt.NDArray[Any],
    beta: npt.NDArray[Any],
    mean: npt.NDArray[Any],
    var: npt.NDArray[Any],
    eps: float,
) -> tuple[FloatArray, FloatArray]:
    """Fold an inference-mode batch norm into the preceding bias-free convolution.

    Returns ``(weight', bias')`` with ``conv(x, weight') + bias' == bn(conv(x, weight))``;
    computed in float64, returned as new float32 arrays.
    """
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    folded = weight.astype(np.float64) * scale.reshape(-1, *([1] * (weight.ndim - 1)))
    bias = beta.astype(np.float64) - mean.astype(np.float64) * scale
    return folded.astype(np.float32), bias.astype(np.float32)


class GraphBuilder:
    """Accumulates nodes and initializers; :meth:`model` returns the finished ``ModelProto``.

    Tensor names are generated from a prefix and a counter, so building the same network
    twice gives byte-identical models.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: list[TensorProto] = []
        self._count = 0

    def _fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def constant(self, prefix: str, value: npt.NDArray[Any]) -> str:
        """Add an initializer (copied into the graph) and return its name."""
        name = self._fresh(prefix)
        self._initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: Sequence[str], prefix: str, **attrs: Any) -> str:
        """Add a one-output node and return its output name."""
        out = self._fresh(prefix)
        self._nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def conv(
        self,
        x: str,
        weight: FloatArray,
        bias: FloatArray,
        *,
        stride: int = 1,
        pads: tuple[int, int, int, int] | None = None,
        group: int = 1,
        prefix: str = "conv",
    ) -> str:
        """A 2-D convolution; ``pads`` (top, left, bottom, right) default to ``k // 2`` each."""
        kh, kw = int(weight.shape[2]), int(weight.shape[3])
        if pads is None:
            pads = (kh // 2, kw // 2, kh // 2, kw // 2)
        w = self.constant(f"{prefix}_w", weight)
        b = self.constant(f"{prefix}_b", bias)
        return self.node(
            "Conv",
            [x, w, b],
            prefix,
            kernel_shape=[kh, kw],
            strides=[stride, stride],
            pads=list(pads),
            group=group,
        )

    def relu6(self, x: str) -> str:
        low = self.constant("zero", np.array(0.0, dtype=np.float32))
        high = self.constant("six", np.array(6.0, dtype=np.float32))
        return self.node("Clip", [x, low, high], "relu6")

    def relu(self, x: str) -> str:
        return self.node("Relu", [x], "relu")

    def add(self, a: str, b: str) -> str:
        return self.node("Add", [a, b], "add")

    def global_avg_pool_flat(self, x: str) -> str:
        pooled = self.node("GlobalAveragePool", [x], "gap")
        return self.node("Flatten", [pooled], "flatten", axis=1)

    def max_pool(self, x: str, kernel: int, stride: int, pad: int) -> str:
        return self.node(
            "MaxPool",
            [x],
            "maxpool",
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
        )

    def gemm(self, x: str, weight: FloatArray, bias: FloatArray, out: str) -> str:
        """``x @ weight.T + bias`` (torch ``Linear`` layout), written to the tensor ``out``."""
        w = self.constant("fc_w", weight)
        b = self.constant("fc_b", bias)
        self._nodes.append(helper.make_node("Gemm", [x, w, b], [out], name=out, transB=1))
        return out

    def model(
        self,
        input_name: str,
        input_shape: Sequence[int | str],
        output_name: str,
        output_shape: Sequence[int | str],
        doc: str,
    ) -> onnx.ModelProto:
        """Finish the graph: float32 input/output, ``ir_version`` 10, opset 17, checked."""
        graph = helper.make_graph(
            self._nodes,
            self._name,
            [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, list(input_shape))],
            [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, list(output_shape))],
            initializer=self._initializers,
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="copyless.model.zoo",
            doc_string=doc,
        )
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model
