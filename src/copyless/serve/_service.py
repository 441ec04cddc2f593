"""What both protocols serve: the repository, the shared-memory regions, the metrics and
the server's lifecycle (live, ready, draining). The REST app (:mod:`._rest`) and the gRPC
servicer (:mod:`._grpc`) translate their wire formats to these calls and nothing else, so
one :class:`InferenceService` behind both answers alike.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from pathlib import Path
from typing import Any

from .. import __version__
from ._access import Client, Restrictions, check_shm
from ._budget import (
    TRIM_AFTER_S,
    TRIM_BYTES,
    ByteBudget,
    DescriptorBudget,
    Throttled,
    fd_limit,
    give_back_memory,
)
from ._errors import Refusal, RequestError
from ._metrics import ServeMetrics
from ._model import ModelRetired, Served
from ._regions import MAX_REGIONS, RegionTable
from ._repository import ControlMode, ModelRepository
from ._request import InferRequest, InferResponse
from ._settings import ServeSettings

__all__ = ["EXTENSIONS", "InferenceService"]

logger = logging.getLogger(__name__)
_throttled = Throttled(logger)

#: The protocol extensions the server declares in its metadata.
EXTENSIONS = ("binary_tensor_data", "system_shared_memory", "model_repository",
              "schedule_policy", "statistics")


class InferenceService:
    """One repository's models served (thread-safe; every call returns at once, ``infer``
    with a future). ``budget``: the process's descriptor budget (None: from the limit in
    force; :class:`~._server.InferenceServer` raises the limit first)."""

    def __init__(self, repository: str | Path, settings: ServeSettings | None = None,
                 budget: DescriptorBudget | None = None) -> None:  # fmt: skip
        self.settings = settings = settings or ServeSettings()
        self.budget = budget or DescriptorBudget.of(fd_limit(), MAX_REGIONS)
        self.metrics = ServeMetrics()
        self.regions = RegionTable(budget=self.budget)
        #: the bytes of requests being read, parsed or queued
        self.inflight = ByteBudget(settings.max_inflight_bytes)
        self.restrictions = {"http": Restrictions(settings.http_restrictions),
                             "grpc": Restrictions(settings.grpc_restrictions)}  # fmt: skip
        self.repository = ModelRepository(
            repository, settings, self.metrics, ControlMode(settings.model_control),
            settings.repository_poll_s, settings.load_models)  # fmt: skip
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

    def model(self, name: str, version: str = "") -> Served:
        """The served ``version`` of ``name`` ('': its newest ready one)."""
        return self.repository.get(name, version)

    def model_ready(self, name: str, version: str = "") -> tuple[bool, str]:
        """Whether ``name`` (``version``) takes requests, and why not; NOT_FOUND for a model
        the repository lacks or a version it does not serve."""
        entry = self.repository.entry(name)
        if self._draining:
            return False, "the server is shutting down"
        if not version and not entry.ready:
            return False, entry.reason
        model = entry.get(version)
        return model.ready, model.reason

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return self.model(name, version).metadata(self.repository.entry(name).versions())

    def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """Triton's statistics extension: every version of every model, or ``name``'s (all
        its versions, or ``version``)."""
        if name and version:
            models = [self.model(name, version)]
        elif name:
            models = self.repository.entry(name).served()
        else:
            models = list(self.repository)
        return [self.metrics.statistics(model.name, model.version) for model in models]

    def index(self) -> list[dict[str, Any]]:
        """The repository index (Triton's model repository extension): a row per version."""
        return [row for entry in self.repository.entries() for row in entry.index()]

    def load_model(self, name: str) -> None:
        """The repository extension's load (explicit mode; blocks while it loads)."""
        if self._draining:
            raise RequestError(Refusal.UNAVAILABLE, "the server is shutting down")
        self.repository.load_model(name)

    def unload_model(self, name: str) -> None:
        self.repository.unload_model(name)

    # -- shared memory (docs/serve.md, "Security") ---------------------------------------
    def shm_register(self, client: Client, name: str, key: object, offset: object,
                     byte_size: object) -> None:  # fmt: skip
        check_shm(client, self.settings.allow_client_shm)
        self.regions.register(client, name, key, offset, byte_size)

    def shm_status(self, client: Client, name: str = "") -> list[dict[str, Any]]:
        check_shm(client, self.settings.allow_client_shm)
        return self.regions.status(client, name)

    def shm_unregister(self, client: Client, name: str = "") -> None:
        check_shm(client, self.settings.allow_client_shm)
        self.regions.unregister(client, name)

    # -- inference -----------------------------------------------------------------------
    def infer(self, request: InferRequest) -> concurrent.futures.Future[InferResponse]:
        """Queue ``request`` on its model; raises :class:`RequestError` when it is refused at
        once, else the future resolves with the response or a RequestError."""
        if self._draining:
            raise RequestError(Refusal.UNAVAILABLE, "the server is shutting down")
        if request.uses_regions:
            check_shm(request.client, self.settings.allow_client_shm)
        for _ in range(3):  # a version replaced under the request: route it again
            model = self.repository.get(request.model, request.version)
            try:
                future = model.submit(request, self.regions)
                self.metrics.request_bytes(model.name, request.nbytes)
                return future
            except ModelRetired:
                continue
        raise RequestError(Refusal.UNAVAILABLE, f"model {request.model!r} is being reloaded: "
                           "retry")  # fmt: skip

    def give_bytes(self, nbytes: int) -> None:
        """Give back what :meth:`hold_bytes` held; after a large request (once its buffers
        are dropped: a moment later on the event loop, and again at :data:`TRIM_AFTER_S`,
        as gRPC's threads and the closing connection drop theirs later on a loaded
        machine) the heap's free pages go back to the system."""
        self.inflight.give(nbytes)
        if nbytes >= TRIM_BYTES:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop here
                give_back_memory()
                return
            for delay in TRIM_AFTER_S:
                loop.call_later(delay, give_back_memory)

    def hold_bytes(self, nbytes: int) -> None:
        """Count ``nbytes`` of a request against the in-flight budget (give them back with
        :meth:`give_bytes`), or refuse it with 503 / RESOURCE_EXHAUSTED."""
        if not self.inflight.take(nbytes):
            _throttled.warning("bytes", f"a request of {nbytes} bytes was refused: "
                               f"{self.inflight.held} bytes of requests are in flight "
                               f"(--max-inflight-mb {self.inflight.capacity >> 20})")
            raise RequestError(Refusal.EXHAUSTED, f"the server holds {self.inflight.held} "
                               "bytes of requests in flight and cannot take this one's "
                               f"{nbytes} now: retry later")  # fmt: skip
