"""A model repository: one subdirectory per model, named as the model, holding a compiled
``.rai`` or a ``vaiml_par_0`` (``par_0``) partition directory (API.md's layout).

Models load one after the other on a thread of their own, after the server is listening:
meanwhile each is LOADING and the server is not ready (``/v2/health/ready`` false), as
Triton reports it. A model that fails to load is UNAVAILABLE with its reason; the others
are served.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from ..types import ModelLoadError
from ._errors import RequestError
from ._metrics import ServeMetrics
from ._model import ServedModel
from ._settings import ServeSettings

__all__ = ["ModelRepository", "find_models"]

logger = logging.getLogger(__name__)

_PARTITIONS = ("vaiml_par_0", "par_0")


def _holds_model(folder: Path) -> bool:
    if any((folder / name).is_dir() for name in _PARTITIONS):
        return True
    return any(p.suffix == ".rai" and p.is_file() for p in folder.iterdir())


def find_models(repository: Path) -> dict[str, Path]:
    """Model name -> its folder; raises :class:`ModelLoadError` for a repository that is
    not a directory or holds no model (folders without one are named in a warning)."""
    if not repository.is_dir():
        raise ModelLoadError(f"model repository {str(repository)!r} is not a directory")
    found, skipped = {}, []
    for folder in sorted(repository.iterdir()):
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        if _holds_model(folder):
            found[folder.name] = folder
        else:
            skipped.append(folder.name)
    if skipped:
        logger.warning("%s: skipped %s: no .rai or vaiml_par_0 inside", repository,
                       ", ".join(skipped))  # fmt: skip
    if not found:
        raise ModelLoadError(
            f"model repository {str(repository)!r} holds no model: each model is a "
            "subdirectory named as the model, with a compiled .rai or a vaiml_par_0 inside"
        )
    return found


class ModelRepository:
    """The repository's models and their loading (see the module docstring)."""

    def __init__(self, path: str | Path, settings: ServeSettings, metrics: ServeMetrics) -> None:
        self.path = Path(path)
        self._models = {name: ServedModel(name, folder, settings, metrics)
                        for name, folder in find_models(self.path).items()}  # fmt: skip
        self._loader: threading.Thread | None = None

    def load(self, background: bool = True) -> None:
        """Load every model: on a thread of its own (``background``) or here."""
        if not background:
            self._load_all()
            return
        self._loader = threading.Thread(target=self._load_all, daemon=True,
                                        name="copyless-serve-loader")  # fmt: skip
        self._loader.start()

    def _load_all(self) -> None:
        for model in self._models.values():
            model.load()

    def wait_loaded(self, timeout_s: float | None = None) -> bool:
        if self._loader is not None:
            self._loader.join(timeout_s)
            return not self._loader.is_alive()
        return True

    @property
    def ready(self) -> bool:
        return all(m.ready for m in self._models.values())

    def __iter__(self) -> Iterator[ServedModel]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)

    def get(self, name: str) -> ServedModel:
        model = self._models.get(name)
        if model is None:
            raise RequestError.not_found(f"unknown model {name!r}; this server has "
                                       f"{', '.join(map(repr, self._models))}")  # fmt: skip
        return model

    def drain(self, timeout_s: float) -> None:
        """Drain every model at once (each within ``timeout_s``)."""
        self.wait_loaded(timeout_s)
        threads = [threading.Thread(target=m.drain, args=(timeout_s,), daemon=True)
                   for m in self._models.values()]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout_s + 2.0)
