"""A server process's listeners: REST (uvicorn running :func:`~._rest.rest_app`), gRPC
(``grpc.aio`` running :class:`~._grpc.InferenceServicer`) and Prometheus metrics (a second
uvicorn on ``/metrics``), all on one asyncio loop on a thread of their own; the models'
pipelines run on theirs.

``start()`` binds every listener (an address in use raises at once: every port is the
server's alone, gRPC's included), then loads the models in the background: the server answers
live at once and ready once every model is loaded. ``stop()`` drains: readiness goes false,
new requests get 503 / UNAVAILABLE, every admitted request is answered, then the listeners
close (what ``copyless-serve`` does on SIGTERM).

An address is ``HOST:PORT`` or ``unix:PATH``: a Unix socket, created ``0600`` (only the
server's user, or root, can connect), where client shared memory is on (:mod:`._access`). At
start the server raises its descriptor limit and splits it (:mod:`._budget`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import grpc
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from tritonclient.grpc import service_pb2_grpc

from ..types import Address, OptionError
from ._budget import DescriptorBudget, raise_fd_limit
from ._connections import guarded_protocol
from ._grpc import InferenceServicer, grpc_options
from ._regions import MAX_REGIONS
from ._rest import rest_app
from ._service import InferenceService
from ._settings import ServeSettings

__all__ = ["InferenceServer"]

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 30.0
_GRACE_S = 5.0
#: Where the listeners are unless told otherwise (Triton's ports, on loopback).
DEFAULT_HTTP = Address("127.0.0.1", 8000)
DEFAULT_GRPC = Address("127.0.0.1", 8001)
DEFAULT_METRICS = Address("127.0.0.1", 8002)


@contextlib.contextmanager
def _private_files() -> Iterator[None]:
    """Files created meanwhile are the user's alone (the umask is the process's: this runs
    before the models load, while no other thread creates files)."""
    old = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(old)


def _clear_stale_socket(path: str) -> None:
    """Remove a socket file no server answers on (one a killed server left); refuse to
    touch anything else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise OptionError(f"cannot listen on unix:{path}: the path exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            os.unlink(path)
            return
        except OSError:
            return
    raise OptionError(f"cannot listen on unix:{path}: another server is listening there")


def _listen(address: Address) -> socket.socket:
    if address.path is not None:
        _clear_stale_socket(address.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _private_files():
                sock.bind(address.path)
            sock.listen(1024)
        except OSError as exc:
            sock.close()
            raise OptionError(f"cannot listen on {address}: {exc.strerror}") from None
        return sock
    try:
        family, kind, proto, _, where = socket.getaddrinfo(
            address.host, address.port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise OptionError(f"{address}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise OptionError(f"cannot listen on {address}: {exc.strerror}") from None
    return sock


def _metrics_app(service: InferenceService) -> Starlette:
    async def metrics(request: Request) -> Response:
        return Response(service.metrics.render(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")
    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])


def _uvicorn(app: Any, settings: ServeSettings | None = None,
             budget: DescriptorBudget | None = None) -> uvicorn.Server:
    """uvicorn for ``app``; with ``settings`` and ``budget``, on the guarded connections of
    :mod:`._connections` (the REST listener; the metrics page takes plain ones)."""
    http: Any = "auto"
    if settings is not None and budget is not None:
        http = guarded_protocol(settings.header_timeout_s,
                                settings.max_connections or budget.connections, budget)
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                            timeout_graceful_shutdown=int(_GRACE_S), server_header=False,
                            http=http)  # fmt: skip
    return uvicorn.Server(config)


class InferenceServer:
    """``copyless-serve`` as an object (see the module docstring); ``None`` for an address
    leaves that listener out. Port 0 picks a free port (``addresses`` says which)."""

    def __init__(
        self,
        repository: str | Path,
        *,
        http: Address | None = DEFAULT_HTTP,
        grpc_address: Address | None = DEFAULT_GRPC,
        metrics: Address | None = DEFAULT_METRICS,
        settings: ServeSettings | None = None,
    ) -> None:
        budget = DescriptorBudget.of(raise_fd_limit(), MAX_REGIONS)
        self.service = InferenceService(repository, settings, budget)
        self._wanted = {"http": http, "grpc": grpc_address, "metrics": metrics}
        self.addresses: dict[str, Address] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._uvicorns: list[uvicorn.Server] = []
        self._grpc: grpc.aio.Server | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._stopped = False

    # -- start ---------------------------------------------------------------------------
    def start(self, background_load: bool = True) -> None:
        """Listen on every address, then load the models (in the background)."""
        sockets = {}
        try:
            for name in ("http", "metrics"):
                address = self._wanted[name]
                if address is not None:
                    sockets[name] = _listen(address)
                    self.addresses[name] = address if address.path is not None else Address(
                        address.host, sockets[name].getsockname()[1])
        except BaseException:
            for sock in sockets.values():
                sock.close()
            raise
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, args=(sockets,), daemon=True,
                                        name="copyless-serve-io")  # fmt: skip
        self._thread.start()
        self._started.wait(_START_TIMEOUT_S)
        if self._failure is not None:
            self._thread.join(_GRACE_S)
            raise OptionError(str(self._failure)) from self._failure
        self.service.load(background_load)

    def _run(self, sockets: dict[str, socket.socket]) -> None:
        loop = self._loop
        if loop is None:
            return
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main(sockets))
        except BaseException as exc:
            if not self._started.is_set():
                self._failure = exc
            else:
                logger.error("the server's listeners failed", exc_info=exc)
        finally:
            self._started.set()
            for sock in sockets.values():
                sock.close()
            loop.close()

    async def _main(self, sockets: dict[str, socket.socket]) -> None:
        tasks: list[asyncio.Task[None]] = []
        if "grpc" in self._wanted and self._wanted["grpc"] is not None:
            await self._start_grpc(self._wanted["grpc"])
        service = self.service
        servers = {"http": _uvicorn(rest_app(service), service.settings, service.budget),
                   "metrics": _uvicorn(_metrics_app(service))}  # fmt: skip
        for name, sock in sockets.items():
            server = servers[name]
            self._uvicorns.append(server)
            tasks.append(asyncio.create_task(_serve(server.serve(sockets=[sock]))))
        while not all(s.started for s in self._uvicorns):
            if any(t.done() for t in tasks):
                break
            await asyncio.sleep(0.01)
        self._started.set()
        if tasks:
            await asyncio.gather(*tasks)
        if self._grpc is not None:
            await self._grpc.wait_for_termination()

    async def _start_grpc(self, address: Address) -> None:
        settings = self.service.settings
        options = grpc_options(settings.max_request_bytes,
                               settings.max_connections or self.service.budget.connections,
                               settings.idle_timeout_s, settings.header_timeout_s)
        server = grpc.aio.server(options=options)
        servicer = InferenceServicer(self.service)
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
        if address.path is not None:
            _clear_stale_socket(address.path)
        elif address.port:  # say "in use" in one line, before gRPC logs its own lines
            _listen(address).close()
        try:
            with _private_files():
                port = server.add_insecure_port(str(address))
        except RuntimeError as exc:
            raise OptionError(f"cannot listen on {address} (gRPC): {_reason(exc)}") from None
        if port == 0 and address.path is None:
            raise OptionError(f"cannot listen on {address} (gRPC)")
        await server.start()
        self._grpc = server
        self.addresses["grpc"] = address if address.path is not None else Address(
            address.host, port)
        servicer.local = address.path if address.path is not None else (address.host, port)

    # -- state ---------------------------------------------------------------------------
    def wait_ready(self, timeout_s: float) -> bool:
        """Whether every model loaded within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.service.ready:
                return True
            if not self.service.repository.wait_loaded(0.05) or self.service.ready:
                continue
            return self.service.ready
        return self.service.ready

    def url(self, name: str = "http") -> str:
        """``HOST:PORT`` of a listener, as tritonclient takes it."""
        return str(self.addresses[name])

    # -- stop ----------------------------------------------------------------------------
    def stop(self, timeout_s: float = 30.0) -> None:
        """Drain (see the module docstring), then close the listeners. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.service.drain(timeout_s)
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        with contextlib.suppress(RuntimeError):  # the loop ended already
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        thread.join(timeout_s + 2 * _GRACE_S)

    async def _shutdown(self) -> None:
        for server in self._uvicorns:
            server.should_exit = True
        if self._grpc is not None:
            await self._grpc.stop(_GRACE_S)

    def __enter__(self) -> InferenceServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _reason(error: RuntimeError) -> str:
    """grpc's bind failure in words (it says only 'Failed to bind to address')."""
    text = str(error)
    return "address already in use" if "bind" in text.lower() else text


async def _serve(serving: Coroutine[Any, Any, None]) -> None:
    """uvicorn's ``serve()``: an exit it asks for (SystemExit on a failed start) is an
    error of this server, not of the process."""
    try:
        await serving
    except SystemExit as exc:
        raise OptionError(f"the HTTP listener failed to start ({exc.code})") from None
