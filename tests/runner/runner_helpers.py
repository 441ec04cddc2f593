"""Runner test helpers: the shared conv net, the onnxruntime reference, tensor pairs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import copyless as cl
from copyless.runner import Runner

# benchmarks/runner.py imports this module with only this folder on sys.path; the shared
# model is one folder up (under pytest that folder is already there: the rootdir conftest).
sys.path.append(str(Path(__file__).resolve().parents[1]))
from model_helpers import conv_net

__all__ = ["conv_net", "reference", "tensors"]


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """What onnxruntime computes on the source model: the ground truth."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(x) for x in session.run(None, feeds)]


def tensors(runner: Runner, view: cl.TensorType) -> tuple[cl.NpuTensor, cl.NpuTensor]:
    """One runner-allocated input and output tensor in ``view``."""
    (in_info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, view)
    (out_info,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, view)
    return runner.allocate_npu_tensor(in_info), runner.allocate_npu_tensor(out_info)
