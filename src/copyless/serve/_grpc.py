"""The Open Inference Protocol over gRPC: ``inference.GRPCInferenceService`` from the
protocol's own ``grpc_service.proto``, through the generated modules ``tritonclient``
ships (``tritonclient.grpc.service_pb2`` / ``service_pb2_grpc``), on ``grpc.aio``.

Implemented: ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelConfig,
ModelInfer (typed contents or ``raw_input_contents``; outputs always as
``raw_output_contents``, an empty entry for an output written into shared memory),
ModelStatistics, RepositoryIndex, the SystemSharedMemory calls and the CudaSharedMemory ones
(nothing is registered: status is empty, unregistering succeeds, registering is refused); the
others answer UNIMPLEMENTED (the generated servicer's default). A refused request aborts with
its :class:`Refusal`'s status code and one message; a cancelled call abandons its rows (they
are not run if not started).

The client of a call (:mod:`._access`): on TCP, its user where its socket is on this host (the
peer address gRPC gives, looked up in the kernel's socket table); on a Unix socket, the
server's own user while the socket file is the server's and ``0600`` (only that user, or
root, can connect; gRPC does not give the peer's credentials), unidentified once its mode
lets others in. Restricted API groups read the call's metadata.
The server's options (:func:`grpc_options`) own its port exclusively, bound its connections
and close idle ones.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from ._access import Client, tcp_peer_uid, unix_socket_client
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

__all__ = ["InferenceServicer", "client_of", "grpc_options"]

logger = logging.getLogger(__name__)

#: InferTensorContents field per datatype (the typed form of an input).
_CONTENTS = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
    "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
    "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
}  # fmt: skip


def grpc_options(max_request_bytes: int, max_connections: int = 0,
                 idle_timeout_s: float = 300.0,
                 handshake_timeout_s: float = 10.0) -> list[tuple[str, int]]:  # fmt: skip
    """The server's channel options: messages up to ``max_request_bytes``; the port its own
    (grpc.aio binds with SO_REUSEPORT otherwise: a second server would silently share it);
    at most ``max_connections`` connections (0: no bound); idle connections (no call in
    flight) closed after ``idle_timeout_s``; a connection's HTTP/2 handshake within
    ``handshake_timeout_s``."""
    options = [("grpc.max_receive_message_length", max_request_bytes),
               ("grpc.max_send_message_length", -1),
               ("grpc.so_reuseport", 0),
               ("grpc.max_connection_idle_ms", int(idle_timeout_s * 1000)),
               ("grpc.server_handshake_timeout_ms", int(handshake_timeout_s * 1000))]
    if max_connections:
        options.append(("grpc.max_allowed_incoming_connections", max_connections))
    return options


def client_of(peer: str, local: tuple[str, int] | str | None) -> Client:
    """The :class:`Client` of a call from ``context.peer()`` (``ipv4:H:P``, ``ipv6:[H]:P``,
    ``unix:...``) and the listener's address (a Unix socket's path)."""
    scheme, _, rest = peer.partition(":")
    if isinstance(local, str):
        return unix_socket_client(local)
    host, _, port = rest.rpartition(":")
    if scheme not in ("ipv4", "ipv6") or not port.isdigit() or local is None:
        return Client("tcp")
    address = (host.strip("[]"), int(port))
    return Client("tcp", locate=lambda: (tcp_peer_uid(address, local), None))


def _param(value: Any) -> Any:
    which = value.WhichOneof("parameter_choice")
    return None if which is None else getattr(value, which)


def _params(parameters: Any) -> dict[str, Any]:
    return {key: _param(value) for key, value in parameters.items()}


def _region_range(params: dict[str, Any], where: str) -> RegionRange | None:
    name = params.get("shared_memory_region")
    if name is None:
        return None
    size, offset = params.get("shared_memory_byte_size"), params.get("shared_memory_offset", 0)
    if not isinstance(name, str) or not name:
        raise RequestError.invalid(f"{where}: shared_memory_region must be a region's name")
    for key, value in (("shared_memory_byte_size", size), ("shared_memory_offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RequestError.invalid(f"{where}: {key} must be an integer >= 0, got {value!r}")
    return RegionRange(name, int(size), int(offset))  # type: ignore[arg-type]


def parse_infer(message: Any, client: Client | None = None, nbytes: int = 0) -> InferRequest:
    """An :class:`InferRequest` from a ``ModelInferRequest`` (typed contents are converted
    once admission has checked their count)."""
    raw = list(message.raw_input_contents)
    inputs, used = [], 0
    for tensor in message.inputs:
        where = f"input {tensor.name!r}"
        shm = _region_range(_params(tensor.parameters), where)
        field = _CONTENTS.get(tensor.datatype)
        typed = getattr(tensor.contents, field) if field else ()
        data, values, elements = None, None, None
        if tensor.datatype == BYTES and len(tensor.contents.bytes_contents):
            elements = tuple(tensor.contents.bytes_contents)
        elif shm is None and not len(typed):
            if used >= len(raw):
                raise RequestError.invalid(f"{where}: no data: neither contents, nor "
                                         "raw_input_contents, nor a shared memory region")
            if tensor.datatype == BYTES:
                elements = bytes_elements(raw[used], where)
            else:
                data = array_from_bytes(raw[used], tensor.datatype, where)
            used += 1
        elif len(typed):
            values = typed
        inputs.append(InputTensor(tensor.name, tensor.datatype, tuple(tensor.shape), data, shm,
                                  values, elements))  # fmt: skip
    if used != len(raw):
        raise RequestError.invalid(f"the request has {len(raw)} raw_input_contents for {used} "
                                 "input(s) sent that way")  # fmt: skip
    if not inputs:
        raise RequestError.invalid("the request has no inputs")
    outputs = None
    if len(message.outputs):
        wishes = []
        for output in message.outputs:
            params = _params(output.parameters)
            if "classification" in params:
                raise RequestError(Refusal.UNSUPPORTED, f"output {output.name!r}: the "
                                 "classification extension is not supported")  # fmt: skip
            wishes.append(OutputWish(output.name, True,
                                     _region_range(params, f"output {output.name!r}")))
        outputs = tuple(wishes)
    priority, timeout_us = schedule_parameters(_params(message.parameters), "the request")
    return InferRequest(message.model_name, message.model_version, message.id, tuple(inputs),
                        outputs, True, client or Client("tcp"), priority, timeout_us,
                        nbytes)  # fmt: skip


def render_infer(response: InferResponse) -> Any:
    message = service_pb2.ModelInferResponse(model_name=response.model,
                                             model_version=response.version, id=response.id)
    for out in response.outputs:
        tensor = message.outputs.add(name=out.tensor.name, datatype=out.tensor.datatype,
                                     shape=list(out.shape))  # fmt: skip
        if out.wish.shm is not None:
            tensor.parameters["shared_memory_region"].string_param = out.wish.shm.region
            nbytes = int(np.prod(out.shape)) * out.tensor.dtype.itemsize
            tensor.parameters["shared_memory_byte_size"].int64_param = nbytes
            message.raw_output_contents.append(b"")
        elif out.data is not None and out.tensor.datatype == BYTES:
            message.raw_output_contents.append(serialize_bytes(list(out.data.reshape(-1))))
        elif out.data is not None:
            message.raw_output_contents.append(out.data.tobytes())
    return message


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """``GRPCInferenceService`` over an :class:`InferenceService`; ``local``: the listener's
    address (to find a TCP client's user) or its Unix socket's path, None where unknown."""

    def __init__(self, service: InferenceService,
                 local: tuple[str, int] | str | None = None) -> None:  # fmt: skip
        self._service = service
        self._restrictions = service.restrictions["grpc"]
        self.local = local

    async def _abort(self, context: Any, error: RequestError) -> None:
        await context.abort(grpc.StatusCode[error.refusal.grpc_code], error.message)

    def _client(self, context: Any, category: str) -> Client:
        """The call's client, once its API group's restriction is met (RequestError if not)."""
        metadata = {key: value for key, value in context.invocation_metadata() or ()
                    if isinstance(value, str)}  # fmt: skip
        granted = self._restrictions.check(category, metadata)
        client = client_of(context.peer() or "", self.local)
        return client.with_keys(granted) if granted else client

    async def _answer(self, context: Any, category: str, call: Callable[[Client], Any]) -> Any:
        try:
            result = call(self._client(context, category))
            if asyncio.isfuture(result):
                result = await result
            return result
        except RequestError as error:
            await self._abort(context, error)
        except (ValueError, RecursionError, UnicodeError) as exc:  # a hostile request
            await self._abort(context, RequestError.invalid(f"malformed request: {exc}"))

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "health", lambda client:
                                  service_pb2.ServerLiveResponse(live=self._service.live))

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "health", lambda client:
                                  service_pb2.ServerReadyResponse(ready=self._service.ready))

    async def ModelReady(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            ready, _ = self._service.model_ready(request.name, request.version)
            return service_pb2.ModelReadyResponse(ready=ready)
        return await self._answer(context, "health", call)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "metadata", lambda client: service_pb2.
                                  ServerMetadataResponse(**self._service.server_metadata()))

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            meta = self._service.model_metadata(request.name, request.version)
            return json_format.ParseDict(meta, service_pb2.ModelMetadataResponse())
        return await self._answer(context, "metadata", call)

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            config = self._service.model(request.name, request.version).config()
            parsed = json_format.ParseDict(config, model_config_pb2.ModelConfig())
            return service_pb2.ModelConfigResponse(config=parsed)
        return await self._answer(context, "model-config", call)

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            stats = self._service.statistics(request.name, request.version)
            return json_format.ParseDict({"model_stats": stats},
                                         service_pb2.ModelStatisticsResponse())  # fmt: skip
        return await self._answer(context, "statistics", call)

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "model-repository", lambda client:
                                  service_pb2.RepositoryIndexResponse(models=[
                                      service_pb2.RepositoryIndexResponse.ModelIndex(**row)
                                      for row in self._service.index()
                                      if not request.ready or row["state"] == "READY"]))

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            if len(request.parameters):
                raise RequestError(Refusal.UNSUPPORTED, "load parameters (a config or files "
                                   "sent with the call) are not supported: put the model in "
                                   "the repository and load it by name")  # fmt: skip
            loop = asyncio.get_running_loop()
            return loop.run_in_executor(None, self._loaded, request.model_name)
        return await self._answer(context, "model-repository", call)

    def _loaded(self, name: str) -> Any:
        self._service.load_model(name)
        return service_pb2.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            self._service.unload_model(request.model_name)
            return service_pb2.RepositoryModelUnloadResponse()
        return await self._answer(context, "model-repository", call)

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        held = 0
        try:
            client = self._client(context, "inference")
            size = request.ByteSize()
            self._service.hold_bytes(size)
            held = size
            parsed = parse_infer(request, client, size)
            response = await asyncio.wrap_future(self._service.infer(parsed))
            return render_infer(response)
        except RequestError as error:
            refusal = error
        except (ValueError, RecursionError, UnicodeError) as exc:  # a hostile request
            refusal = RequestError.invalid(f"malformed request: {exc}")
        finally:
            self._service.give_bytes(held)
        await self._abort(context, refusal)

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            answer = service_pb2.SystemSharedMemoryStatusResponse()
            for region in self._service.shm_status(client, request.name):
                answer.regions[region["name"]].CopyFrom(
                    service_pb2.SystemSharedMemoryStatusResponse.RegionStatus(**region))
            return answer
        return await self._answer(context, "shared-memory", call)

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            self._service.shm_register(client, request.name, request.key, request.offset,
                                       request.byte_size)  # fmt: skip
            return service_pb2.SystemSharedMemoryRegisterResponse()
        return await self._answer(context, "shared-memory", call)

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            self._service.shm_unregister(client, request.name)
            return service_pb2.SystemSharedMemoryUnregisterResponse()
        return await self._answer(context, "shared-memory", call)

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            if request.name:
                raise RequestError.not_found(f"no CUDA shared memory region {request.name!r} "
                                             "is registered")  # fmt: skip
            return service_pb2.CudaSharedMemoryStatusResponse()
        return await self._answer(context, "shared-memory", call)

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        # none is ever registered: unregistering is idempotent, as in Triton
        return await self._answer(context, "shared-memory", lambda client:
                                  service_pb2.CudaSharedMemoryUnregisterResponse())

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        def call(client: Client) -> Any:
            raise RequestError(Refusal.UNSUPPORTED, "CUDA shared memory is not supported by "
                               "this server; use system shared memory")  # fmt: skip
        return await self._answer(context, "shared-memory", call)
