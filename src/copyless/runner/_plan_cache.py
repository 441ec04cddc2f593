"""Call plans by tensor identity: a repeated call reuses the plan that validated it.

A plan (:class:`~copyless.runner._plan.CallPlan`) is what checking a call's tensors against
the model yields: where each one binds, what must be converted or gathered. Building one
costs microseconds per tensor; a loop that calls again with the same tensor objects finds
its plan here by their ids. Read, replaced and evicted by every calling thread, so only
under the cache's lock (never held while a plan is built).
"""

from __future__ import annotations

import threading
from typing import Any

from ..model import CompiledModel
from ..types import StatusCode
from ._plan import BindError, CallPlan, build_plan

#: Plans kept at most; the cache is cleared when full (a loop re-enters its plan at once).
CACHE_SIZE = 64


class PlanCache:
    """The plans of one runner's calls, by the identity of their tensors."""

    def __init__(self, model: CompiledModel, memory: tuple[str, ...]) -> None:
        self._model = model
        self._memory = memory  # the devices whose memory the engines bind in place
        self._plans: dict[tuple[int, ...], CallPlan] = {}
        self._lock = threading.Lock()

    def plan(self, inputs: Any, outputs: Any) -> tuple[CallPlan, bool]:
        """The call's plan, and whether it came from the cache (a repeated call). Raises
        :class:`BindError` (with the status to return) for tensors that do not fit."""
        try:
            key = (
                *[id(t) for row in inputs for t in row],
                -1,
                *[id(t) for row in outputs for t in row],
            )
        except TypeError:
            key = ()
        if key:
            with self._lock:
                cached = self._plans.get(key)
                if cached is not None:
                    # A released tensor's id may be reused by a new tensor: its weak
                    # reference says. A closed tensor's memory may be gone: its cached
                    # binding must not be reused.
                    live = cached.tensors
                    if live is not None and not any(t.closed for t in live):
                        return cached, True
                    del self._plans[key]
        plan = self._build(inputs, outputs)
        if key:
            with self._lock:
                if len(self._plans) >= CACHE_SIZE:
                    self._plans.clear()
                self._plans[key] = plan
        return plan, False

    def _build(self, inputs: Any, outputs: Any) -> CallPlan:
        model = self._model
        try:
            return build_plan(
                model.inputs, model.outputs, model.batch_size, inputs, outputs, self._memory
            )
        except BindError:
            raise
        except Exception as exc:  # a broken tensor is bad input: never raise from execute
            raise BindError(StatusCode.INVALID_INPUT, f"unusable tensor: {exc}") from exc

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()
