"""The resource plan of a batch job: how many actors, how much CPU each, before submitting.

Ray schedules by logical resources and never says that a request cannot be met: an actor
pool whose actors reserve every CPU of the cluster starves the decode tasks forever (their
demand stays pending, no error). :func:`plan_resources` checks, before anything is
submitted, that the actors and at least one decode task fit the nodes (each request on one
node, the actors spread as Ray Data spreads them); when they do not, it shrinks the request,
first by giving each actor a fraction of a CPU (an actor's engine threads follow what it
reserved), then by running fewer actors, and says so in :attr:`ResourcePlan.note`. When
not even one actor and one decode task fit, it raises :class:`PlanError` with the numbers.

:func:`node_cpus` reads the CPUs of each alive node of the connected cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._cluster import ClusterError

#: The CPU a decode task reserves. Not the actors' 1.0, or Ray Data would fuse the decode
#: stage into the actors (no decoding in parallel with inference); not much less either:
#: at 0.5 two decode tasks ran beside each actor on a 2-core machine and took the cores
#: inference needs (2,000 photos, 1 / 2 actors: 107 / 102 images/s at 0.5, 114 / 106 at 0.9).
DECODE_CPUS = 0.9
#: The fractions of a CPU an actor is shrunk to, in order, before actors are dropped.
ACTOR_FRACTIONS = (0.75, 0.5, 0.25)


class PlanError(ClusterError):
    """Not even one actor and one decode task fit the cluster."""


@dataclass(frozen=True, slots=True)
class ResourcePlan:
    """What the job asks Ray for: ``actors`` actors of ``cpus_per_actor`` CPUs each, decode
    tasks of ``decode_cpus``. ``note`` is one line saying how the plan differs from the
    request ("" when it does not)."""

    actors: int
    cpus_per_actor: float
    decode_cpus: float = DECODE_CPUS
    note: str = ""


def plan_resources(
    actors: int,
    nodes: Sequence[float],
    *,
    cpus_per_actor: float = 1.0,
    decode_cpus: float = DECODE_CPUS,
) -> ResourcePlan:
    """Fit ``actors`` actors of ``cpus_per_actor`` CPUs and one decode task of
    ``decode_cpus`` onto ``nodes`` (the CPUs of each node); see the module docstring.

    Raises :class:`PlanError` when one actor of the smallest fraction and one decode task
    do not fit.
    """
    if actors < 1 or not cpus_per_actor > 0 or not decode_cpus > 0:
        raise ValueError("plan_resources needs actors >= 1 and positive CPU requests")
    if _fits(actors, cpus_per_actor, decode_cpus, nodes):
        return ResourcePlan(actors, cpus_per_actor, decode_cpus)
    fractions = [f for f in ACTOR_FRACTIONS if f < cpus_per_actor]
    for count in range(actors, 0, -1):
        for cpus in [cpus_per_actor, *fractions] if count < actors else fractions:
            if _fits(count, cpus, decode_cpus, nodes):
                asked = _request(actors, cpus_per_actor, decode_cpus)
                note = (
                    f"{asked} do not fit {_describe(nodes)}: running {count} actor(s) "
                    f"of {cpus:g} CPU each"
                )
                return ResourcePlan(count, cpus, decode_cpus, note)
    smallest = min([cpus_per_actor, *fractions])
    raise PlanError(
        f"{_request(1, smallest, decode_cpus)} do not fit {_describe(nodes)}"
        + ("" if nodes else " (no node has a CPU)")
    )


def node_cpus() -> list[float]:
    """The CPUs of each alive node of the connected cluster, less what others hold now:
    each node's total, scaled so that their sum is the cluster's free CPUs."""
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    totals = [float(n.get("Resources", {}).get("CPU", 0.0)) for n in alive]
    free = float(ray.available_resources().get("CPU", 0.0))  # type: ignore[no-untyped-call]
    total = sum(totals)
    if total <= 0:
        return [0.0 for _ in totals]
    scale = min(1.0, free / total)
    return [cpus * scale for cpus in totals]


def _fits(actors: int, cpus: float, decode: float, nodes: Sequence[float]) -> bool:
    """Each actor on the node with the most left (Ray Data spreads its actors); then a
    decode task on the node with the most left."""
    free = sorted(nodes)
    for _ in range(actors):
        if not free or free[-1] + 1e-9 < cpus:
            return False
        free[-1] -= cpus
        free.sort()
    return bool(free) and free[-1] + 1e-9 >= decode


def _request(actors: int, cpus: float, decode: float) -> str:
    return f"{actors} actor(s) of {cpus:g} CPU and a decode task of {decode:g} CPU"


def _describe(nodes: Sequence[float]) -> str:
    cpus = ", ".join(f"{n:g}" for n in nodes) or "none"
    return f"the cluster's free CPUs ({sum(nodes):g}: {cpus} on {len(nodes)} node(s))"
