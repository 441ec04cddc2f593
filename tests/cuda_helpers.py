"""When the GPU tests can run: one check shared by every folder with ``cuda``-marked tests.

Tests marked ``cuda`` need onnxruntime-gpu and an NVIDIA device; ``requires_cuda`` skips
them anywhere else, with the reason (what is missing) in the skip message.
"""

from __future__ import annotations

import onnxruntime as ort
import pytest

import copyless as cl
from copyless.backends import _cuda_driver
from copyless.backends._cuda_options import CUDA_PROVIDER


def cuda_missing() -> str | None:
    """Why the GPU tests cannot run here, or None when a CUDA provider and a device exist."""
    if CUDA_PROVIDER not in ort.get_available_providers():
        return f"onnxruntime {ort.__version__} has no {CUDA_PROVIDER}"
    try:
        count = _cuda_driver.driver().device_count
    except cl.CopylessError as exc:
        return str(exc)
    return None if count > 0 else "no CUDA device"


CUDA_MISSING = cuda_missing()
requires_cuda = pytest.mark.skipif(CUDA_MISSING is not None, reason=f"needs CUDA: {CUDA_MISSING}")
