"""A stall watchdog for a job's result batches: never wait forever in silence.

:func:`watch` yields the items of an iterator of result batches (Ray Data's
``iter_batches``, which blocks without a timeout) while a watcher thread times each wait.
When no item has come for ``stall_s`` seconds it asks the cluster what it is waiting for:
with resource demands pending that the free resources cannot take (tasks or actors starved
by what the job itself holds), the wait is cancelled and :class:`StallError` raised,
naming the demand and what the cluster has; otherwise (a slow batch still running, demands
waiting their turn), it logs a warning and waits another ``stall_s``.

No thread is signalled: the watcher calls ``cancel`` (for a Ray Data job,
:meth:`JobControl.fail <copyless.ray._control.JobControl.fail>`: the execution ends itself
at its next scheduling step, which makes the blocked ``next()`` raise from Ray Data's own
polling loop), and the iterating thread raises :class:`StallError` when its ``next()``
returns. (An earlier watchdog interrupted the main thread with ``SIGUSR1`` inside Ray's
code; after other Ray drivers had run in the same process that segfaulted it.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from ._cluster import ClusterError

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a job may go without a result batch before the watchdog looks (seconds).
STALL_S = 120.0
_POLL_S = 0.5
_HIDDEN = frozenset({"memory", "object_store_memory"})


class StallError(ClusterError):
    """No progress for the watchdog's time while Ray had demands it could not place."""


@dataclass(frozen=True, slots=True)
class Demand:
    """``count`` pending requests of ``bundle`` (e.g. ``{"CPU": 0.9}``)."""

    bundle: dict[str, float]
    count: int

    def __str__(self) -> str:
        return f"{self.count} x {_resources(self.bundle)}"


@dataclass(frozen=True, slots=True)
class ClusterState:
    """What the watchdog reports: pending demands, total and free resources, nodes."""

    demands: tuple[Demand, ...]
    total: dict[str, float]
    free: dict[str, float]
    nodes: int


def cluster_state() -> ClusterState:
    """The connected cluster's pending task/actor demands and resources."""
    import ray
    from ray.autoscaler.v2.sdk import get_cluster_status

    address = ray.get_runtime_context().gcs_address
    status = get_cluster_status(address)
    demands = tuple(
        Demand(dict(request.bundle), int(request.count))
        for demand in status.resource_demands.ray_task_actor_demand
        for request in demand.bundles_by_count
    )
    nodes = len(status.active_nodes) + len(status.idle_nodes)
    return ClusterState(demands, status.total_resources(), status.available_resources(), nodes)


def stall_message(stall_s: float, state: ClusterState) -> str:
    """One line: the demand Ray cannot place and what the cluster has."""
    demands = ", ".join(map(str, state.demands))
    return (
        f"no progress for {stall_s:g} s: Ray cannot place {demands} (pending); the cluster "
        f"has {_resources(state.total)} on {state.nodes} node(s), {_resources(state.free)} "
        "free. Run fewer actors or give the cluster more CPUs"
    )


def watch(
    items: Iterator[T],
    stall_s: float = STALL_S,
    state: Callable[[], ClusterState] = cluster_state,
    cancel: Callable[[BaseException], None] | None = None,
) -> Iterator[T]:
    """Yield ``items``; raise :class:`StallError` when none has come for ``stall_s``
    seconds while ``state()`` shows pending demands that cannot be placed.

    On such a stall the watcher thread calls ``cancel(error)``, which must make the blocked
    ``next(items)`` return or raise soon (``JobControl.fail`` does for a Ray Data
    iterator); whatever it then returns or raises, the iterating thread raises
    :class:`StallError`. Without ``cancel`` a stall is logged as a warning every
    ``stall_s`` and the wait goes on. Works from any thread; no signal is used.
    """
    watcher = _Watcher(stall_s, state, cancel)
    watcher.start()
    try:
        while True:
            with watcher.waiting():
                try:
                    item = next(items)
                except StopIteration:
                    watcher.check()
                    return
                except Exception:
                    watcher.check()  # the cancelled iterator's own error: the stall's
                    raise
            watcher.check()
            yield item
    finally:
        watcher.stop()


class _Watcher:
    """The watcher thread and what it shares with the iterating thread."""

    def __init__(
        self,
        stall_s: float,
        state: Callable[[], ClusterState],
        cancel: Callable[[BaseException], None] | None,
    ) -> None:
        self._stall_s = stall_s
        self._state = state
        self._cancel = cancel
        self._lock = threading.Lock()
        self._since: float | None = None  # when the current wait began; None: not waiting
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.message = ""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="copyless-ray-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()

    def check(self) -> None:
        """Raise :class:`StallError` once the watcher has cancelled the iteration."""
        with self._lock:
            message = self.message
        if message:
            raise StallError(message) from None

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        self.check()
        with self._lock:
            self._since = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._since = None

    def _run(self) -> None:
        while not self._stopped.wait(_POLL_S):
            with self._lock:
                since = self._since
            if since is None or time.monotonic() - since < self._stall_s:
                continue
            message = _check(self._stall_s, self._state)
            with self._lock:
                if self._since != since:  # progress while the cluster was asked
                    continue
                self._since = time.monotonic()  # the next report after another stall_s
                if message and self._cancel is not None:
                    self.message = message
            if message and self._cancel is not None:
                self._cancel(StallError(message))
                return
            if message:
                logger.warning("%s", message)


def _check(stall_s: float, state: Callable[[], ClusterState]) -> str:
    """The stall message when demands are pending; "" (a warning logged) otherwise."""
    try:
        found = state()
    except Exception as exc:  # noqa: BLE001 - the status query is best effort
        logger.warning("no progress for %g s; no cluster status: %s", stall_s, exc)
        return ""
    stuck = [d for d in found.demands if not _fits(d.bundle, found.free)]
    if stuck:
        return stall_message(stall_s, dataclasses.replace(found, demands=tuple(stuck)))
    logger.warning(
        "no progress for %g s; nothing is starved (%s free): a batch is still running",
        stall_s,
        _resources(found.free),
    )
    return ""


def _fits(bundle: dict[str, float], free: dict[str, float]) -> bool:
    """A demand the free resources could take now is waiting its turn, not starved."""
    return all(free.get(key, 0.0) + 1e-9 >= amount for key, amount in bundle.items())


def _resources(values: dict[str, float]) -> str:
    """``{CPU: 2, GPU: 1}``: the schedulable resources, not memory or node labels."""
    shown = [
        f"{key}: {value:g}"
        for key, value in sorted(values.items())
        if key not in _HIDDEN and not key.startswith("node:")
    ]
    return "{" + ", ".join(shown) + "}"
