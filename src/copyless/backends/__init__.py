"""Backends layer: the engine contract, and the engines found by name.

Writing a backend is a user's job too, so the contract is public (as httpx exports
``BaseTransport``): a :class:`Backend` loads a partition into an :class:`Engine`, which hands
out one :class:`EngineContext` per execution slot; what an engine can do beyond the core
contract is declared as data in :class:`Capabilities`. Backends are found by name
(:func:`create_backend`, see :mod:`._registry`); the optional ones (OpenVINO, CUDA) are
imported on first use.
"""

from __future__ import annotations

from ._base import HOST, Backend, Capabilities, Engine, EngineContext, common_memory
from ._cache import EngineCache
from ._cuda_options import CudaOptions, check_available, parse_cuda_options
from ._onnxruntime import OrtCpuBackend, session_options
from ._registry import BACKENDS, backend_maker, create_backend, register_backend

__all__ = [
    "BACKENDS",
    "HOST",
    "Backend",
    "Capabilities",
    "CudaOptions",
    "Engine",
    "EngineCache",
    "EngineContext",
    "OrtCpuBackend",
    "backend_maker",
    "check_available",
    "common_memory",
    "create_backend",
    "parse_cuda_options",
    "register_backend",
    "session_options",
]
