"""The Open Inference Protocol over gRPC: ``inference.GRPCInferenceService`` from the
protocol's own ``grpc_service.proto``, through the generated modules ``tritonclient``
ships (``tritonclient.grpc.service_pb2`` / ``service_pb2_grpc``), on ``grpc.aio``.

Implemented: ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelConfig,
ModelInfer (typed contents or ``raw_input_contents``; outputs always as
``raw_output_contents``, an empty entry for an output written into shared memory),
RepositoryIndex and the SystemSharedMemory calls; the others answer UNIMPLEMENTED (the
generated servicer's default). A refused request aborts with its :class:`Refusal`'s status
code and one message; a cancelled call abandons its rows (they are not run if not started).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

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

__all__ = ["InferenceServicer", "grpc_options"]

logger = logging.getLogger(__name__)

#: InferTensorContents field per datatype (the typed form of an input).
_CONTENTS = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
    "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
    "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
}  # fmt: skip


def grpc_options(max_request_bytes: int) -> list[tuple[str, int]]:
    return [("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.max_send_message_length", -1)]  # fmt: skip


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


def parse_infer(message: Any) -> InferRequest:
    """An :class:`InferRequest` from a ``ModelInferRequest``."""
    raw = list(message.raw_input_contents)
    inputs, used = [], 0
    for tensor in message.inputs:
        where = f"input {tensor.name!r}"
        shm = _region_range(_params(tensor.parameters), where)
        field = _CONTENTS.get(tensor.datatype)
        typed = list(getattr(tensor.contents, field)) if field else []
        data = None
        if shm is None and not typed:
            if used >= len(raw):
                raise RequestError.invalid(f"{where}: no data: neither contents, nor "
                                         "raw_input_contents, nor a shared memory region")
            data, used = array_from_bytes(raw[used], tensor.datatype, where), used + 1
        elif typed:
            data = array_from_values(typed, tensor.datatype, where)
        inputs.append(InputTensor(tensor.name, tensor.datatype, tuple(tensor.shape), data, shm))
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
    return InferRequest(message.model_name, message.model_version, message.id, tuple(inputs),
                        outputs, True)  # fmt: skip


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
        elif out.data is not None:
            message.raw_output_contents.append(out.data.tobytes())
    return message


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """``GRPCInferenceService`` over an :class:`InferenceService`."""

    def __init__(self, service: InferenceService) -> None:
        self._service = service

    async def _abort(self, context: Any, error: RequestError) -> None:
        await context.abort(grpc.StatusCode[error.refusal.grpc_code], error.message)

    async def _answer(self, context: Any, call: Any) -> Any:
        try:
            result = call()
            if asyncio.isfuture(result):
                result = await result
            return result
        except RequestError as error:
            await self._abort(context, error)

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=self._service.live)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerReadyResponse(ready=self._service.ready)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        def call() -> Any:
            model = self._service.model(request.name, request.version)
            ready = model.ready and not self._service.draining
            return service_pb2.ModelReadyResponse(ready=ready)
        return await self._answer(context, call)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerMetadataResponse(**self._service.server_metadata())

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        def call() -> Any:
            meta = self._service.model(request.name, request.version).metadata()
            return json_format.ParseDict(meta, service_pb2.ModelMetadataResponse())
        return await self._answer(context, call)

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        def call() -> Any:
            config = self._service.model(request.name, request.version).config()
            parsed = json_format.ParseDict(config, model_config_pb2.ModelConfig())
            return service_pb2.ModelConfigResponse(config=parsed)
        return await self._answer(context, call)

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        return service_pb2.RepositoryIndexResponse(models=[
            service_pb2.RepositoryIndexResponse.ModelIndex(**row)
            for row in self._service.index()
        ])  # fmt: skip

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        try:
            parsed = parse_infer(request)
            response = await asyncio.wrap_future(self._service.infer(parsed))
        except RequestError as error:
            await self._abort(context, error)
        return render_infer(response)

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        def call() -> Any:
            answer = service_pb2.SystemSharedMemoryStatusResponse()
            for region in self._service.regions.status(request.name):
                answer.regions[region["name"]].CopyFrom(
                    service_pb2.SystemSharedMemoryStatusResponse.RegionStatus(**region))
            return answer
        return await self._answer(context, call)

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        def call() -> Any:
            self._service.regions.register(request.name, request.key, request.offset,
                                           request.byte_size)  # fmt: skip
            return service_pb2.SystemSharedMemoryRegisterResponse()
        return await self._answer(context, call)

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self._service.regions.unregister(request.name)
        return service_pb2.SystemSharedMemoryUnregisterResponse()
