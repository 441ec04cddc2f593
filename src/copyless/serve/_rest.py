"""The Open Inference Protocol over HTTP/REST, as an ASGI application (Starlette): what
``copyless-serve --http`` runs under uvicorn, and what a Ray Serve replica mounts as its
ingress (see docs/serve.md).

Routes (``/versions/{version}`` may follow a model's name): ``GET /v2/health/live``,
``/v2/health/ready``, ``/v2``, ``/v2/models/{model}``, ``/v2/models/{model}/ready``,
``/v2/models/{model}/config``; ``POST /v2/models/{model}/infer`` (JSON data, or the binary
tensor data extension: ``Inference-Header-Content-Length`` bytes of JSON, then each
input's ``binary_data_size`` bytes in order), ``/v2/repository/index``; the system
shared-memory extension under ``/v2/systemsharedmemory`` (CUDA shared memory: nothing is
registered, status is empty, unregistering succeeds, registering is refused); statistics
(``/v2/models[/{model}[/versions/{v}]]/stats``, Triton's). Errors are ``{"error": ...}`` with
the status of their :class:`Refusal`, as Triton answers and ``tritonclient`` reads.

Every malformed request is a 4xx, never a 500. An inference body is refused before it is
read when its ``Content-Length`` passes the model's own bound (its inputs at its batch:
:func:`~._admit.request_bound`) or the server's ``max_request_bytes`` (413), or when the
bytes of requests in flight would pass ``max_inflight_bytes`` (503); the connection is then
closed so the unread body is not taken. A body must arrive within ``body_timeout_s`` plus a
second per MB, and no more than ``header_timeout_s`` may pass between two of its pieces.
Nothing is parsed by hand but the binary extension's split of the body. Restricted API groups
and client shared memory follow :mod:`._access`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._access import UNIDENTIFIED, Client
from ._admit import request_bound
from ._connections import OVER_BUDGET, PEER, ConnectionPeer
from ._errors import Refusal, RequestError
from ._images import BYTES, bytes_elements, serialize_bytes
from ._request import (
    InferRequest,
    InferResponse,
    InputTensor,
    OutputWish,
    RegionRange,
    array_from_bytes,
    schedule_parameters,
)
from ._service import InferenceService

__all__ = ["HEADER_LENGTH", "rest_app"]

logger = logging.getLogger(__name__)

HEADER_LENGTH = "Inference-Header-Content-Length"
_MODEL = "/v2/models/{model}"
_VERSIONED = "/v2/models/{model}/versions/{version}"
#: A length as HTTP writes it: ASCII digits only (``int()`` takes ``"²"``-like digits too).
_LENGTH = re.compile(r"[0-9]{1,18}")
#: Bytes per second a body must arrive at, at least, past its ``body_timeout_s``.
_MIN_BODY_RATE = 1_000_000
#: How much more memory a parsed JSON request takes than its text, about (Python numbers).
_JSON_INFLATION = 4


def _error(refusal: Refusal, message: str, close: bool = False) -> JSONResponse:
    headers = {"connection": "close"} if close else None
    return JSONResponse({"error": message}, status_code=refusal.http_status, headers=headers)


def _length(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    if not _LENGTH.fullmatch(text):
        raise RequestError.invalid(f"{what} {text!r} is not a length in bytes")
    return int(text)


class _BodyLimits:
    """How a body is read: at most ``limit`` bytes, within the time the settings give."""

    def __init__(self, limit: int, idle_s: float, base_s: float) -> None:
        self.limit, self.idle_s, self.base_s = limit, idle_s, base_s

    def deadline(self, nbytes: int) -> float:
        return time.monotonic() + self.base_s + nbytes / _MIN_BODY_RATE


async def _read_body(request: Request, limits: _BodyLimits) -> bytearray:
    """The body, read into one buffer of its declared length (no list of chunks joined: the
    memory goes back to the system when the request ends)."""
    declared = _length(request.headers.get("content-length"), "Content-Length")
    limit = limits.limit
    if declared is not None and declared > limit:
        raise RequestError(Refusal.TOO_LARGE, f"the request's {declared} bytes exceed the "
                         f"limit of {limit} here")  # fmt: skip
    body = bytearray(declared or 0)
    size, deadline = 0, limits.deadline(declared or limit)
    stream = request.stream()
    try:
        while True:
            wait = min(limits.idle_s, deadline - time.monotonic())
            try:
                chunk = await asyncio.wait_for(stream.__anext__(), max(wait, 0.001))
            except StopAsyncIteration:
                break
            if size + len(chunk) > (declared if declared is not None else limit):
                raise RequestError(Refusal.TOO_LARGE, "the request's body runs past its "
                                   f"Content-Length or the limit of {limit} bytes here")
            if declared is None:
                body += chunk
            else:
                body[size : size + len(chunk)] = chunk
            size += len(chunk)
    except asyncio.TimeoutError:
        raise RequestError(Refusal.TIMEOUT, f"the request's body did not arrive in time "
                           f"({size} bytes in)") from None  # fmt: skip
    except ClientDisconnect:  # nobody reads the answer; nothing was queued
        raise RequestError.invalid("the client went away before sending its whole request") \
            from None
    finally:
        await stream.aclose()
    if declared is not None and size != declared:
        raise RequestError.invalid(f"the body has {size} bytes, its Content-Length {declared}")
    return body


def _json(raw: bytes | bytearray | memoryview, what: str) -> Any:
    try:
        return json.loads(raw if isinstance(raw, (bytes, bytearray)) else bytes(raw))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise RequestError.invalid(f"malformed JSON in the {what}: {reason}") from None


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RequestError.invalid(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _int(params: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RequestError.invalid(f"{where}: parameter {key!r} must be an integer >= 0, "
                                 f"got {value!r}")  # fmt: skip
    return value


def region_range(params: dict[str, Any], where: str) -> RegionRange | None:
    """The shared-memory parameters of a tensor (REST and gRPC name them alike)."""
    name = params.get("shared_memory_region")
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise RequestError.invalid(f"{where}: shared_memory_region must be a region's name")
    return RegionRange(name, _int(params, "shared_memory_byte_size", where),
                       _int(params, "shared_memory_offset", where, 0))  # fmt: skip


def _parse_inputs(doc: dict[str, Any], binary: memoryview) -> tuple[InputTensor, ...]:
    entries = doc.get("inputs")
    if not isinstance(entries, list) or not entries:
        raise RequestError.invalid("the request needs a non-empty 'inputs' list")
    inputs, at = [], 0
    for number, entry in enumerate(entries):
        entry = _object(entry, f"inputs[{number}]")
        name = entry.get("name")
        where = f"input {name!r}" if isinstance(name, str) else f"inputs[{number}]"
        datatype, shape = entry.get("datatype"), entry.get("shape")
        if not isinstance(name, str) or not isinstance(datatype, str) \
                or not isinstance(shape, list):  # fmt: skip
            raise RequestError.invalid(f"{where} needs 'name', 'datatype' and 'shape'")
        params = _object(entry.get("parameters", {}), f"{where} parameters")
        shm = region_range(params, where)
        data, elements = None, None
        if "binary_data_size" in params:
            size = _int(params, "binary_data_size", where)
            if at + size > len(binary):
                raise RequestError.invalid(
                    f"{where}: binary_data_size {size} runs past the {len(binary)} bytes of "
                    "binary data after the JSON header"
                )
            piece, at = binary[at : at + size], at + size
            if datatype == BYTES:
                elements = bytes_elements(piece, where)
            else:
                data = array_from_bytes(piece, datatype, where)
        values = entry.get("data")
        if (data is not None or elements is not None) and values is not None:
            raise RequestError.invalid(f"{where}: both 'data' and binary_data_size are given")
        if values is not None and datatype == BYTES:
            raise RequestError.invalid(f"{where}: encoded images (BYTES) go as binary data "
                                       "(JSON strings cannot hold them)")  # fmt: skip
        if values is not None and not isinstance(values, list):
            values = [values]
        inputs.append(InputTensor(name, datatype, tuple(shape), data, shm, values, elements))
    if at != len(binary):
        raise RequestError.invalid(f"the request has {len(binary)} bytes of binary data after "
                                 f"its JSON header; its inputs declare {at}")  # fmt: skip
    return tuple(inputs)


def _parse_outputs(doc: dict[str, Any]) -> tuple[OutputWish, ...] | None:
    entries = doc.get("outputs")
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise RequestError.invalid("'outputs' must be a list")
    wishes = []
    for number, entry in enumerate(entries):
        entry = _object(entry, f"outputs[{number}]")
        name = entry.get("name")
        if not isinstance(name, str):
            raise RequestError.invalid(f"outputs[{number}] needs a 'name'")
        params = _object(entry.get("parameters", {}), f"output {name!r} parameters")
        if "classification" in params:
            raise RequestError(Refusal.UNSUPPORTED, f"output {name!r}: the classification "
                             "extension is not supported; ask for the tensor")  # fmt: skip
        binary = params.get("binary_data")
        if binary is not None and not isinstance(binary, bool):
            raise RequestError.invalid(f"output {name!r}: binary_data must be true or false")
        wishes.append(OutputWish(name, binary, region_range(params, f"output {name!r}")))
    return tuple(wishes)


def parse_infer(model: str, version: str, body: bytes | bytearray, header_length: str | None,
                client: Client = UNIDENTIFIED) -> InferRequest:  # fmt: skip
    """An :class:`InferRequest` from a REST body (JSON, or JSON then binary data)."""
    view = memoryview(body)
    length = _length(header_length, HEADER_LENGTH)
    if length is None:
        head, binary = view, view[:0]
    else:
        if length > len(body):
            raise RequestError.invalid(f"{HEADER_LENGTH} {header_length!r} is not a length "
                                     f"within the {len(body)}-byte body")  # fmt: skip
        head, binary = view[:length], view[length:]
    doc = _object(_json(head, "request"), "the request")
    params = _object(doc.get("parameters", {}), "the request's parameters")
    binary_outputs = params.get("binary_data_output", False)
    if not isinstance(binary_outputs, bool):
        raise RequestError.invalid("binary_data_output must be true or false")
    request_id = doc.get("id", "")
    if not isinstance(request_id, str):
        raise RequestError.invalid("the request's 'id' must be a string")
    priority, timeout_us = schedule_parameters(params, "the request")
    return InferRequest(model, version, request_id, _parse_inputs(doc, binary),
                        _parse_outputs(doc), binary_outputs, client, priority, timeout_us,
                        len(body))  # fmt: skip


def render_infer(response: InferResponse, binary_default: bool) -> Response:
    """The REST response: JSON, followed by the binary outputs when there are any."""
    outputs, blobs = [], []
    for out in response.outputs:
        entry: dict[str, Any] = {"name": out.tensor.name, "datatype": out.tensor.datatype,
                                 "shape": list(out.shape)}  # fmt: skip
        wish = out.wish
        if wish.shm is not None:
            pass  # written into the region; as Triton answers, no parameters (its C++ client
            # reads binary_data_size from every output's parameters)
        elif out.data is not None and (wish.binary if wish.binary is not None
                                       else binary_default):  # fmt: skip
            blob = serialize_bytes(list(out.data.reshape(-1))) if out.tensor.datatype == BYTES \
                else out.data.reshape(-1).view("u1").data  # fmt: skip
            entry["parameters"] = {"binary_data_size": len(blob) if isinstance(blob, bytes)
                                   else blob.nbytes}  # fmt: skip
            blobs.append(blob)
        elif out.data is not None and out.tensor.datatype == BYTES:  # JSON strings
            entry["data"] = [bytes(v).decode("utf-8", "replace") for v in out.data.reshape(-1)]
        elif out.data is not None:
            values = out.data.reshape(-1)
            entry["data"] = (values.astype("f4") if values.dtype.kind == "V"
                             or values.dtype.name in ("bfloat16", "float16")
                             else values).tolist()  # fmt: skip
        outputs.append(entry)
    doc: dict[str, Any] = {"model_name": response.model, "model_version": response.version,
                           "outputs": outputs}  # fmt: skip
    if response.id:
        doc["id"] = response.id
    head = json.dumps(doc, separators=(",", ":")).encode()
    if not blobs:
        return Response(head, media_type="application/json")
    return Response(b"".join([head, *blobs]), media_type="application/octet-stream",
                    headers={HEADER_LENGTH: str(len(head))})  # fmt: skip


_Handler = Callable[[Request, Client], Awaitable[Response]]
#: How often a queued request checks that its client is still there, seconds.
_DISCONNECT_POLL_S = 0.05


async def _answer_or_cancel(request: Request, future: concurrent.futures.Future[InferResponse]
                            ) -> InferResponse:  # fmt: skip
    """The response, unless the client goes away first: then the request is cancelled (its
    rows not yet run are dropped) and counted as such."""
    answer = asyncio.wrap_future(future)
    while True:
        done, _ = await asyncio.wait({answer}, timeout=_DISCONNECT_POLL_S)
        if done:
            return answer.result()
        if await request.is_disconnected():
            answer.cancel()
            raise RequestError(Refusal.UNAVAILABLE, "the client went away")
#: Paths a connection over the connection budget may still ask for.
_HEALTH = ("/v2/health/live", "/v2/health/ready")


def _client(request: Request) -> Client:
    peer = request.scope.get("state", {}).get(PEER)
    return peer.client if isinstance(peer, ConnectionPeer) else UNIDENTIFIED


def rest_app(service: InferenceService) -> Starlette:
    """The ASGI app serving ``service`` over REST (see the module docstring)."""
    settings = service.settings
    restrictions = service.restrictions["http"]

    def guarded(category: str, handler: _Handler) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` behind the restriction of its API group, given the request's client."""
        async def endpoint(request: Request) -> Response:
            if request.scope.get("state", {}).get(OVER_BUDGET) and \
                    request.url.path not in _HEALTH:  # fmt: skip
                return _error(Refusal.EXHAUSTED, "the server holds as many connections as its "
                              "descriptor budget allows: retry later", close=True)  # fmt: skip
            granted = restrictions.check(category, request.headers)
            client = _client(request)
            if granted:
                client = client.with_keys(granted)
            try:
                return await handler(request, client)
            except (ValueError, RecursionError, UnicodeError) as exc:  # a hostile request
                raise RequestError.invalid(f"malformed request: {exc}") from None
        return endpoint

    def ok(body: Any = None) -> Response:
        return JSONResponse(body) if body is not None else Response(status_code=200)

    async def live(request: Request, client: Client) -> Response:
        return ok() if service.live else _error(Refusal.UNAVAILABLE, "not live")

    async def ready(request: Request, client: Client) -> Response:
        if service.ready:
            return ok()
        return _error(Refusal.INVALID_ARGUMENT, "the server is not ready: "
                      + ("shutting down" if service.draining else "loading its models"))

    async def server_metadata(request: Request, client: Client) -> Response:
        return ok(service.server_metadata())

    def _model(request: Request) -> Any:
        p = request.path_params
        return service.model(p["model"], p.get("version", ""))

    async def model_metadata(request: Request, client: Client) -> Response:
        p = request.path_params
        return ok(service.model_metadata(p["model"], p.get("version", "")))

    async def model_ready(request: Request, client: Client) -> Response:
        p = request.path_params
        ready, reason = service.model_ready(p["model"], p.get("version", ""))
        if ready:
            return ok()
        return _error(Refusal.INVALID_ARGUMENT, f"model {p['model']!r} is not ready: {reason}")

    async def model_config(request: Request, client: Client) -> Response:
        return ok(_model(request).config())

    async def statistics(request: Request, client: Client) -> Response:
        p = request.path_params
        return ok({"model_stats": service.statistics(p.get("model", ""), p.get("version", ""))})

    async def infer(request: Request, client: Client) -> Response:
        p = request.path_params
        if service.draining:
            raise RequestError(Refusal.UNAVAILABLE, "the server is shutting down")
        header_length = request.headers.get(HEADER_LENGTH)
        binary = header_length is not None
        try:  # refused before the body is read: the connection closes (the body is not taken)
            model = service.model(p["model"], p.get("version", ""))
            model.check_ready()
            limit = min(settings.max_request_bytes, request_bound(model.shape, binary))
            declared = _length(request.headers.get("content-length"), "Content-Length")
            if declared is not None and declared > limit:
                raise RequestError(Refusal.TOO_LARGE, f"the request's {declared} bytes exceed "
                                   f"the {limit} that model {model.name!r} can take")
            held = (limit if declared is None else declared) * (1 if binary else _JSON_INFLATION)
            service.hold_bytes(held)
        except RequestError as refused:
            return _error(refused.refusal, refused.message, close=True)
        try:
            body = await _read_body(request, _BodyLimits(limit, settings.header_timeout_s,
                                                         settings.body_timeout_s))  # fmt: skip
            parsed = parse_infer(p["model"], p.get("version", ""), body, header_length, client)
            del body  # the parsed request holds what it needs of it
            response = await _answer_or_cancel(request, service.infer(parsed))
            return render_infer(response, parsed.binary_outputs)
        finally:
            service.give_bytes(held)

    async def index(request: Request, client: Client) -> Response:
        body = await _small_body(request) if request.headers.get("content-length") not in \
            (None, "0") else {}  # fmt: skip
        ready = body.get("ready", False)
        if not isinstance(ready, bool):
            raise RequestError.invalid("'ready' must be true or false")
        return ok([row for row in service.index() if not ready or row["state"] == "READY"])

    async def load(request: Request, client: Client) -> Response:
        if request.headers.get("content-length") not in (None, "0"):
            params = (await _small_body(request)).get("parameters", {})
            if params:
                raise RequestError(Refusal.UNSUPPORTED, "load parameters (a config or files "
                                   "sent with the call) are not supported: put the model in "
                                   "the repository and load it by name")  # fmt: skip
        await asyncio.get_running_loop().run_in_executor(None, service.load_model,
                                                         request.path_params["model"])
        return ok()

    async def unload(request: Request, client: Client) -> Response:
        await asyncio.get_running_loop().run_in_executor(None, service.unload_model,
                                                         request.path_params["model"])
        return ok()

    async def _small_body(request: Request) -> dict[str, Any]:
        limits = _BodyLimits(1 << 16, settings.header_timeout_s, settings.body_timeout_s)
        return _object(_json(await _read_body(request, limits), "request"), "the request")

    async def shm_status(request: Request, client: Client) -> Response:
        return ok(service.shm_status(client, request.path_params.get("name", "")))

    async def shm_register(request: Request, client: Client) -> Response:
        body = await _small_body(request)
        service.shm_register(client, request.path_params["name"], body.get("key"),
                             body.get("offset", 0), body.get("byte_size"))  # fmt: skip
        return ok()

    async def shm_unregister(request: Request, client: Client) -> Response:
        service.shm_unregister(client, request.path_params.get("name", ""))
        return ok()

    async def cuda_status(request: Request, client: Client) -> Response:
        name = request.path_params.get("name", "")
        if name:
            raise RequestError.not_found(f"no CUDA shared memory region {name!r} is registered")
        return ok([])

    async def cuda_unregister(request: Request, client: Client) -> Response:
        return ok()  # none is ever registered: unregistering is idempotent, as in Triton

    async def cuda_register(request: Request, client: Client) -> Response:
        return _error(Refusal.UNSUPPORTED, "CUDA shared memory is not supported by this "
                      "server; use system shared memory")  # fmt: skip

    get, post = ["GET"], ["POST"]
    table: list[tuple[str, str, _Handler, list[str]]] = [
        ("/v2/health/live", "health", live, get),
        ("/v2/health/ready", "health", ready, get),
        ("/v2", "metadata", server_metadata, get),
        ("/v2/repository/index", "model-repository", index, post),
        ("/v2/repository/models/{model}/load", "model-repository", load, post),
        ("/v2/repository/models/{model}/unload", "model-repository", unload, post),
        ("/v2/models/stats", "statistics", statistics, get),
        ("/v2/systemsharedmemory/status", "shared-memory", shm_status, get),
        ("/v2/systemsharedmemory/region/{name:path}/status", "shared-memory", shm_status, get),
        ("/v2/systemsharedmemory/region/{name:path}/register", "shared-memory", shm_register,
         post),
        ("/v2/systemsharedmemory/region/{name:path}/unregister", "shared-memory",
         shm_unregister, post),
        ("/v2/systemsharedmemory/unregister", "shared-memory", shm_unregister, post),
        ("/v2/cudasharedmemory/status", "shared-memory", cuda_status, get),
        ("/v2/cudasharedmemory/region/{name:path}/status", "shared-memory", cuda_status, get),
        ("/v2/cudasharedmemory/region/{name:path}/register", "shared-memory", cuda_register,
         post),
        ("/v2/cudasharedmemory/region/{name:path}/unregister", "shared-memory",
         cuda_unregister, post),
        ("/v2/cudasharedmemory/unregister", "shared-memory", cuda_unregister, post),
    ]  # fmt: skip
    for base in (_MODEL, _VERSIONED):
        table += [
            (base, "metadata", model_metadata, get),
            (base + "/ready", "health", model_ready, get),
            (base + "/config", "model-config", model_config, get),
            (base + "/stats", "statistics", statistics, get),
            (base + "/infer", "inference", infer, post),
        ]
    routes = [Route(path, guarded(category, handler), methods=methods)
              for path, category, handler, methods in table]  # fmt: skip

    async def on_serve_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, RequestError):
            raise exc
        # a body that ran past its limit or its time is left unread: close
        return _error(exc.refusal, exc.message,
                      close=exc.refusal in (Refusal.TOO_LARGE, Refusal.TIMEOUT))

    async def on_http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        return JSONResponse({"error": f"{request.method} {request.url.path}: {detail}"},
                            status_code=status)  # fmt: skip

    async def on_crash(request: Request, exc: Exception) -> Response:
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(Refusal.INTERNAL, f"internal error: {exc}")

    return Starlette(routes=routes, exception_handlers={
        RequestError: on_serve_error, HTTPException: on_http_error, Exception: on_crash,
    })  # fmt: skip
