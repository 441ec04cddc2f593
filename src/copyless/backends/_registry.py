"""Backends found by name, as tinygrad finds ``runtime/ops_<name>.py``.

The backend called ``NAME`` lives in ``copyless/backends/_NAME.py`` and defines, at module
level, ``create_backend(options, cache) -> Backend``: ``options`` is the runner's
:class:`~copyless.runner.RunnerOptions` (each backend declares, as a ``Protocol`` in its
module, the fields it reads), ``cache`` the engine cache or None. The module is imported on
first use only, so an optional engine (OpenVINO, the CUDA providers) costs nothing until a
runner asks for it, and its import error (an :class:`~copyless.types.UnsupportedError`
with the install hint) reaches the caller unchanged.

Adding a backend: write ``_NAME.py`` (the contract is :mod:`copyless.backends._base`),
add ``NAME`` to :data:`BACKENDS`, and teach the runner factory which runner type and
device resolve to it. A backend outside copyless registers its factory with
:func:`register_backend`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ..types import OptionError
from ._base import Backend
from ._cache import EngineCache

#: The backends shipped with copyless: the name, and the module is ``_<name>.py``.
BACKENDS = ("onnxruntime", "cuda", "openvino")

BackendMaker = Callable[[Any, "EngineCache | None"], Backend]
_registered: dict[str, BackendMaker] = {}


def register_backend(name: str, maker: BackendMaker) -> None:
    """Make ``create_backend(name, ...)`` call ``maker(options, cache)`` (a backend written
    outside copyless). A shipped name cannot be replaced."""
    if name in BACKENDS:
        raise OptionError(f"backend {name!r} ships with copyless and cannot be replaced")
    _registered[name] = maker


def backend_maker(name: str) -> BackendMaker:
    """The factory of the backend called ``name``; its module is imported here, on first
    use. Raises OptionError for a name nobody registered, UnsupportedError when the
    backend's package is not installed."""
    if name in _registered:
        return _registered[name]
    if name not in BACKENDS:
        known = sorted((*BACKENDS, *_registered))
        raise OptionError(f"no backend named {name!r}: known backends are {known}")
    module = importlib.import_module(f"{__package__}._{name}")
    maker: BackendMaker = module.create_backend
    return maker


def create_backend(name: str, options: Any, cache: EngineCache | None = None) -> Backend:
    """The backend called ``name``, configured from ``options`` (see the module docstring)."""
    return backend_maker(name)(options, cache)
