"""The serving layer: ``copyless-serve``, the Open Inference Protocol (KServe v2) over REST
and gRPC, so that ``tritonclient`` and every other client of Triton, OpenVINO Model Server,
MLServer and KServe work unchanged; dynamic batching on each model's
:class:`~copyless.Pipeline`; the system shared-memory extension; Prometheus metrics.

Above ``pipeline/`` (a model is a Runner and a Pipeline), beside ``ray/`` and ``apps/``.
Needs the ``copyless[serve]`` extra (grpcio, tritonclient's generated protocol modules,
Starlette and uvicorn, prometheus-client).

* :class:`InferenceServer` -- the listeners (REST, gRPC, metrics) of one process;
* :class:`InferenceService` -- what both protocols serve: the repository's models, the
  shared-memory regions, the metrics, readiness and draining;
* :func:`rest_app` -- the REST side as an ASGI app (a Ray Serve replica's ingress);
* :func:`replicated_app` -- the repository from replicas behind Ray Serve;
* :class:`InferenceServicer` -- the gRPC side;
* :class:`ServeSettings` -- batching delay, queue bound, engine, request and in-flight byte
  limits, timeouts, client shared memory and restricted APIs (:class:`Restriction`);
* :class:`Client` -- who sent a request, as far as the server can tell;
* :class:`DescriptorBudget` -- the descriptors a server spends on regions and connections;
* :class:`RequestError` / :class:`Refusal` -- every refusal, and its HTTP status / gRPC code.
"""

from ..types import Address, parse_address
from ._access import API_CATEGORIES, Client, Restriction, parse_restriction
from ._budget import DescriptorBudget
from ._errors import Refusal, RequestError
from ._grpc import InferenceServicer
from ._metrics import ServeMetrics
from ._model import VERSION, ModelState, ServedModel
from ._regions import MAX_REGIONS, RegionTable
from ._replicas import ServeReplica, replicated_app
from ._repository import ModelRepository, find_models
from ._rest import rest_app
from ._server import InferenceServer
from ._service import InferenceService
from ._settings import DEFAULT_MAX_INFLIGHT_BYTES, DEFAULT_MAX_REQUEST_BYTES, ServeSettings

__all__ = [
    "API_CATEGORIES",
    "DEFAULT_MAX_INFLIGHT_BYTES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "MAX_REGIONS",
    "VERSION",
    "Address",
    "Client",
    "DescriptorBudget",
    "InferenceServer",
    "InferenceService",
    "InferenceServicer",
    "ModelRepository",
    "ModelState",
    "Refusal",
    "RegionTable",
    "RequestError",
    "Restriction",
    "ServeMetrics",
    "ServedModel",
    "ServeReplica",
    "ServeSettings",
    "find_models",
    "parse_address",
    "parse_restriction",
    "replicated_app",
    "rest_app",
]
