"""Replaying repeated sync calls in C: the runner's side of ``_fast.c``.

A sync call whose tensors are all bound in place (nothing converted, gathered or synced)
and that repeats a cached plan gets an execution slot of its own, bound once; the C
:class:`~copyless.runner._fast.FastPath` then replays the next calls with the very same
tensor objects (identity and "not closed" checks, then the engine's raw call). Up to
``ENTRIES`` plans are replayed at once; installing another replaces one round-robin and its
slot goes back to the runner. Entries refer to their tensors weakly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..types import StatusCode
from ._fast import FastPath
from ._plan import CallPlan
from ._slot import ExecutionSlot

logger = logging.getLogger(__name__)

ENTRIES = 4  # MAX_ENTRIES in _fast.c


class Replays:
    """The fast path of one runner and the slots its entries own."""

    def __init__(self, enabled: bool) -> None:
        self.path = FastPath(StatusCode.SUCCESS)
        self._enabled = enabled
        self._slots: list[ExecutionSlot | None] = [None] * ENTRIES
        self._plans: list[CallPlan | None] = [None] * ENTRIES  # what each entry replays

    def install(
        self,
        plan: CallPlan,
        inputs: Any,
        outputs: Any,
        acquire: Callable[[], ExecutionSlot],
        release: Callable[[ExecutionSlot], None],
    ) -> None:
        """Replay ``plan`` from now on if it binds everything in place. ``acquire`` gives a
        slot (kept by the entry), ``release`` takes back one no entry needs."""
        if not self._enabled or plan.staged_inputs or plan.staged_outputs or plan.synced_refs:
            return
        if any(installed is plan for installed in self._plans):
            return  # replayable already (this call took the Python path: another one ran)
        tensors = tuple(t for row in inputs for t in row) + tuple(t for row in outputs for t in row)
        if len(tensors) != len(plan.refs):  # pragma: no cover - the plan validated the rows
            return
        try:
            slot = acquire()
        except Exception:  # noqa: BLE001 - no replay then; the Python path still works
            return
        try:
            slot.prepare(plan)
            index = self.path.install(
                tensors,
                (len(inputs), len(inputs[0])),
                (len(outputs), len(outputs[0])),
                slot.call_targets(),
                (plan.in_ranges, plan.out_ranges),
            )
        except Exception as exc:  # noqa: BLE001
            logger.debug("fast path not installed: %s", exc)
            index = -1
        if index < 0:
            release(slot)
            return
        previous, self._slots[index] = self._slots[index], slot
        self._plans[index] = plan
        if previous is not None:
            release(previous)

    def stop(self, timeout_s: float) -> bool:
        """Refuse later replays and wait (bounded) for a running one; True once none runs."""
        self.path.close()
        deadline = time.monotonic() + timeout_s
        while self.path.busy and time.monotonic() < deadline:
            time.sleep(0.001)
        self.path.reset()
        return not self.path.busy

