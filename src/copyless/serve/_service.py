"""What both protocols serve: the repository, the shared-memory regions, the metrics and
the server's lifecycle (live, ready, draining). The REST app (:mod:`._rest`) and the gRPC
servicer (:mod:`._grpc`) translate their wire formats to these calls and nothing else, so
one :class:`InferenceService` behind both answers alike.
"""

from __future__ import annotations

import concurrent.futures
import logging
from pathlib import Path
from typing import Any

from .. import __version__
from ._errors import Refusal, RequestError
from ._metrics import ServeMetrics
from ._model import ServedModel
from ._regions import RegionTable
from ._repository import ModelRepository
from ._request import InferRequest, InferResponse
from ._settings import ServeSettings

__all__ = ["EXTENSIONS", "InferenceService"]

logger = logging.getLogger(__name__)

#: The protocol extensions the server declares in its metadata.
EXTENSIONS = ("binary_tensor_data", "system_shared_memory", "model_repository")


class InferenceService:
    """One repository's models served (thread-safe; every call returns at once, ``infer``
    with a future)."""

    def __init__(self, repository: str | Path, settings: ServeSettings | None = None) -> None:
        self.settings = settings or ServeSettings()
        self.metrics = ServeMetrics()
        self.regions = RegionTable()
        self.repository = ModelRepository(repository, self.settings, self.metrics)
        self._draining = False

    # -- lifecycle -----------------------------------------------------------------------
    def load(self, background: bool = True) -> None:
        self.repository.load(background)

    @property
    def live(self) -> bool:
        return True

    @property
    def ready(self) -> bool:
        """Every model loaded and the server not draining."""
        return not self._draining and self.repository.ready

    @property
    def draining(self) -> bool:
        return self._draining

    def drain(self, timeout_s: float = 30.0) -> None:
        """Refuse new requests (503 / UNAVAILABLE), answer the ones admitted (within
        ``timeout_s``), close every model and region."""
        self._draining = True
        self.repository.drain(timeout_s)
        self.regions.close()

    # -- metadata ------------------------------------------------------------------------
    def server_metadata(self) -> dict[str, Any]:
        return {"name": "copyless", "version": __version__, "extensions": list(EXTENSIONS)}

    def model(self, name: str, version: str = "") -> ServedModel:
        model = self.repository.get(name)
        model.check_version(version)
        return model

    def index(self) -> list[dict[str, Any]]:
        """The repository index (Triton's model repository extension)."""
        rows = []
        for model in self.repository:
            row = {"name": model.name, "version": "1", "state": model.state.value}
            if model.reason:
                row["reason"] = model.reason
            rows.append(row)
        return rows

    # -- inference -----------------------------------------------------------------------
    def infer(self, request: InferRequest) -> concurrent.futures.Future[InferResponse]:
        """Queue ``request`` on its model; raises :class:`RequestError` when it is refused at
        once, else the future resolves with the response or a RequestError."""
        if self._draining:
            raise RequestError(Refusal.UNAVAILABLE, "the server is shutting down")
        return self.repository.get(request.model).submit(request, self.regions)
