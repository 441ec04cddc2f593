"""The Open Inference Protocol over HTTP/REST, as an ASGI application (Starlette): what
``copyless-serve --http`` runs under uvicorn, and what a Ray Serve replica mounts as its
ingress (see docs/serve.md).

Routes (``/versions/{version}`` may follow a model's name): ``GET /v2/health/live``,
``/v2/health/ready``, ``/v2``, ``/v2/models/{model}``, ``/v2/models/{model}/ready``,
``/v2/models/{model}/config``; ``POST /v2/models/{model}/infer`` (JSON data, or the binary
tensor data extension: ``Inference-Header-Content-Length`` bytes of JSON, then each
input's ``binary_data_size`` bytes in order), ``/v2/repository/index``; the system
shared-memory extension under ``/v2/systemsharedmemory``. Errors are ``{"error": ...}``
with the status of their :class:`Refusal`, as Triton answers and ``tritonclient`` reads.
The request body is read up to ``max_request_bytes`` (413 past it); nothing is parsed by
hand but the binary extension's split of the body.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._errors import Refusal, RequestError
from ._request import (
    InferRequest,
    InferResponse,
    InputTensor,
    OutputWish,
    RegionRange,
    array_from_bytes,
    array_from_values,
)
from ._service import InferenceService

__all__ = ["HEADER_LENGTH", "rest_app"]

logger = logging.getLogger(__name__)

HEADER_LENGTH = "Inference-Header-Content-Length"
_MODEL = "/v2/models/{model}"
_VERSIONED = "/v2/models/{model}/versions/{version}"


def _error(refusal: Refusal, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=refusal.http_status)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(Refusal.TOO_LARGE, f"the request's {declared} bytes exceed the "
                         f"server's limit of {limit}")  # fmt: skip
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(Refusal.TOO_LARGE, f"the request exceeds the server's limit "
                                 f"of {limit} bytes")  # fmt: skip
            chunks.append(chunk)
    except ClientDisconnect:  # nobody reads the answer; nothing was queued
        raise RequestError.invalid("the client went away before sending its whole request") \
            from None
    return b"".join(chunks)


def _json(raw: bytes | memoryview, what: str) -> Any:
    try:
        return json.loads(bytes(raw))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError.invalid(f"malformed JSON in the {what}: {exc}") from None


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
        data = None
        if "binary_data_size" in params:
            size = _int(params, "binary_data_size", where)
            if at + size > len(binary):
                raise RequestError.invalid(
                    f"{where}: binary_data_size {size} runs past the {len(binary)} bytes of "
                    "binary data after the JSON header"
                )
            data, at = array_from_bytes(binary[at : at + size], datatype, where), at + size
        elif "data" in entry:
            data = array_from_values(entry["data"], datatype, where)
        inputs.append(InputTensor(name, datatype, tuple(shape), data, shm))
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


def parse_infer(model: str, version: str, body: bytes, header_length: str | None
                ) -> InferRequest:  # fmt: skip
    """An :class:`InferRequest` from a REST body (JSON, or JSON then binary data)."""
    view = memoryview(body)
    if header_length is None:
        head, binary = view, view[:0]
    else:
        if not header_length.isdigit() or int(header_length) > len(body):
            raise RequestError.invalid(f"{HEADER_LENGTH} {header_length!r} is not a length "
                                     f"within the {len(body)}-byte body")  # fmt: skip
        head, binary = view[: int(header_length)], view[int(header_length) :]
    doc = _object(_json(head, "request"), "the request")
    params = _object(doc.get("parameters", {}), "the request's parameters")
    binary_outputs = params.get("binary_data_output", False)
    if not isinstance(binary_outputs, bool):
        raise RequestError.invalid("binary_data_output must be true or false")
    request_id = doc.get("id", "")
    if not isinstance(request_id, str):
        raise RequestError.invalid("the request's 'id' must be a string")
    return InferRequest(model, version, request_id, _parse_inputs(doc, binary),
                        _parse_outputs(doc), binary_outputs)  # fmt: skip


def render_infer(response: InferResponse, binary_default: bool) -> Response:
    """The REST response: JSON, followed by the binary outputs when there are any."""
    outputs, blobs = [], []
    for out in response.outputs:
        entry: dict[str, Any] = {"name": out.tensor.name, "datatype": out.tensor.datatype,
                                 "shape": list(out.shape)}  # fmt: skip
        wish = out.wish
        if wish.shm is not None:
            nbytes = (out.data.nbytes if out.data is not None
                      else _nbytes(out.shape, out.tensor.dtype.itemsize))  # fmt: skip
            entry["parameters"] = {"shared_memory_region": wish.shm.region,
                                   "shared_memory_byte_size": nbytes}  # fmt: skip
        elif out.data is not None and (wish.binary if wish.binary is not None
                                       else binary_default):  # fmt: skip
            entry["parameters"] = {"binary_data_size": out.data.nbytes}
            blobs.append(out.data.reshape(-1).view("u1").data)
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


def _nbytes(shape: tuple[int, ...], itemsize: int) -> int:
    size = itemsize
    for dim in shape:
        size *= dim
    return size


def rest_app(service: InferenceService) -> Starlette:
    """The ASGI app serving ``service`` over REST (see the module docstring)."""
    limit = service.settings.max_request_bytes

    def ok(body: Any = None) -> Response:
        return JSONResponse(body) if body is not None else Response(status_code=200)

    async def live(request: Request) -> Response:
        return ok() if service.live else _error(Refusal.UNAVAILABLE, "not live")

    async def ready(request: Request) -> Response:
        if service.ready:
            return ok()
        return _error(Refusal.INVALID_ARGUMENT, "the server is not ready: "
                      + ("shutting down" if service.draining else "loading its models"))

    async def server_metadata(request: Request) -> Response:
        return ok(service.server_metadata())

    def _model(request: Request) -> Any:
        p = request.path_params
        return service.model(p["model"], p.get("version", ""))

    async def model_metadata(request: Request) -> Response:
        return ok(_model(request).metadata())

    async def model_ready(request: Request) -> Response:
        model = _model(request)
        if model.ready and not service.draining:
            return ok()
        return _error(Refusal.INVALID_ARGUMENT, f"model {model.name!r} is not ready: "
                      f"{model.reason or 'the server is shutting down'}")  # fmt: skip

    async def model_config(request: Request) -> Response:
        return ok(_model(request).config())

    async def infer(request: Request) -> Response:
        p = request.path_params
        if service.draining:
            raise RequestError(Refusal.UNAVAILABLE, "the server is shutting down")
        service.model(p["model"], p.get("version", "")).check_ready()  # before reading
        body = await _read_body(request, limit)
        parsed = parse_infer(p["model"], p.get("version", ""), body,
                             request.headers.get(HEADER_LENGTH))  # fmt: skip
        response = await asyncio.wrap_future(service.infer(parsed))
        return render_infer(response, parsed.binary_outputs)

    async def index(request: Request) -> Response:
        return ok(service.index())

    async def shm_status(request: Request) -> Response:
        return ok(service.regions.status(request.path_params.get("name", "")))

    async def shm_register(request: Request) -> Response:
        body = _object(_json(await _read_body(request, 1 << 16), "request"), "the request")
        service.regions.register(request.path_params["name"], body.get("key"),
                                 body.get("offset", 0), body.get("byte_size"))  # fmt: skip
        return ok()

    async def shm_unregister(request: Request) -> Response:
        service.regions.unregister(request.path_params.get("name", ""))
        return ok()

    async def cuda_shm(request: Request) -> Response:
        return _error(Refusal.UNSUPPORTED, "CUDA shared memory is not supported by this "
                      "server; use system shared memory")  # fmt: skip

    get, post = ["GET"], ["POST"]
    routes = [
        Route("/v2/health/live", live, methods=get),
        Route("/v2/health/ready", ready, methods=get),
        Route("/v2", server_metadata, methods=get),
        Route("/v2/repository/index", index, methods=post),
        Route("/v2/systemsharedmemory/status", shm_status, methods=get),
        Route("/v2/systemsharedmemory/region/{name:path}/status", shm_status, methods=get),
        Route("/v2/systemsharedmemory/region/{name:path}/register", shm_register, methods=post),
        Route("/v2/systemsharedmemory/region/{name:path}/unregister", shm_unregister,
              methods=post),
        Route("/v2/systemsharedmemory/unregister", shm_unregister, methods=post),
        Route("/v2/cudasharedmemory/{rest:path}", cuda_shm, methods=["GET", "POST"]),
    ]  # fmt: skip
    for base in (_MODEL, _VERSIONED):
        routes += [
            Route(base, model_metadata, methods=get),
            Route(base + "/ready", model_ready, methods=get),
            Route(base + "/config", model_config, methods=get),
            Route(base + "/infer", infer, methods=post),
        ]

    async def on_serve_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, RequestError):
            raise exc
        return _error(exc.refusal, exc.message)

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
