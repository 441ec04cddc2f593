"""When the GPU tests can run: one check shared by every folder with ``cuda``-marked tests.

Tests marked ``cuda`` need onnxruntime-gpu, CuPy and an NVIDIA device; ``requires_cuda``
skips them anywhere else, with copyless's own one-line reason (what is missing) in the skip
message. ``cupy``/``torch`` are imported only where they are installed.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

import copyless as cl
from copyless.backends._cuda_options import check_available


def cuda_missing() -> str | None:
    """Why the GPU tests cannot run here, or None when ``device="cuda"`` can."""
    try:
        check_available("cuda")
    except cl.CopylessError as exc:
        return str(exc)
    return None


CUDA_MISSING = cuda_missing()
requires_cuda = pytest.mark.skipif(CUDA_MISSING is not None, reason=f"needs CUDA: {CUDA_MISSING}")


def optional(module: str) -> Any:
    """``module`` (cupy, torch) or a skip naming it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        pytest.skip(f"{module} is not installed")
