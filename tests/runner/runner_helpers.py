"""Runner test helpers: the onnxruntime reference; the conv net and tensor pair re-exported."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

# benchmarks/runner.py imports this module with only this folder on sys.path; the shared
# model is one folder up (under pytest that folder is already there: the rootdir conftest).
sys.path.append(str(Path(__file__).resolve().parents[1]))
from model_helpers import conv_net, tensors

__all__ = ["conv_net", "reference", "tensors"]


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """What onnxruntime computes on the source model: the ground truth."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(x) for x in session.run(None, feeds)]
