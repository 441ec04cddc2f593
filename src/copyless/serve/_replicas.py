"""More than one machine: the repository served by replicas behind Ray Serve, each replica
a copyless :class:`InferenceService` (its own runners and pipelines) with the REST app as
its ingress, so that ``tritonclient.http`` talks to Ray Serve's HTTP proxy unchanged::

    import ray
    from ray import serve
    from copyless.serve import replicated_app

    ray.init(address="auto")                                # the cluster
    serve.start(http_options={"host": "0.0.0.0", "port": 8000})
    serve.run(replicated_app("/models", replicas=4), route_prefix="/", name="copyless")

The repository must be readable at the same path on every node. Ray Serve spreads the
requests over the replicas; each replica batches what it gets on its own pipeline. What
does not cross replicas: the system shared-memory extension (a region is registered with
one replica, and is local to one host anyway) and gRPC (Ray Serve's gRPC proxy takes its
own servicers; use one ``copyless-serve`` per host for gRPC). Needs ``ray[serve]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._rest import rest_app
from ._service import InferenceService
from ._settings import ServeSettings

__all__ = ["replicated_app"]


class ServeReplica:
    """One replica: loads every model of the repository, then serves REST (Ray Serve calls
    ``__serve_build_asgi_app__`` after the constructor)."""

    def __init__(self, repository: str, settings: ServeSettings | None) -> None:
        self.service = InferenceService(repository, settings)
        self.service.load(background=False)

    def __serve_build_asgi_app__(self) -> Any:
        return rest_app(self.service)

    def __del__(self) -> None:
        # Ray Serve drops a replica by deleting it: answer what was admitted first
        self.service.drain(timeout_s=10.0)


def replicated_app(repository: str | Path, *, replicas: int = 2,
                   settings: ServeSettings | None = None,
                   ray_actor_options: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """A Ray Serve application (``serve.run`` it) of ``replicas`` replicas of the
    repository (see the module docstring)."""
    from ray import serve

    ingress = serve.ingress()(ServeReplica)
    deployment = serve.deployment(name="copyless", num_replicas=replicas,
                                  ray_actor_options=ray_actor_options or {"num_cpus": 1})
    return deployment(ingress).bind(str(Path(repository).resolve()), settings)
