"""Execution slots over one list of engines, reused from call to call.

A slot (:class:`~copyless.runner._slot.ExecutionSlot`) holds one binding context per engine
and the staging buffers of converted views, so a call that takes a slot bound last time to
the same tensors rebinds nothing. Slots are made on demand (a new slot allocates its
intermediates) and kept; ``acquire``/``release`` are list pops and appends, atomic under
the GIL, so the hot path takes no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ..backends import Engine
from ..model import CompiledModel
from ._slot import ExecutionSlot


class ExecutionSlots:
    """Free slots over ``engines``, and every slot made (closed with the pool)."""

    def __init__(self, model: CompiledModel, engines: Sequence[Engine]) -> None:
        self._model = model
        self._engines = list(engines)
        self._free: list[ExecutionSlot] = []
        self._made: list[ExecutionSlot] = []
        self._lock = threading.Lock()  # guards _made only

    def acquire(self) -> ExecutionSlot:
        """A free slot, or a new one (raises MemoryError or the engine's error)."""
        try:
            return self._free.pop()
        except IndexError:
            slot = ExecutionSlot(self._model, self._engines)
            with self._lock:
                self._made.append(slot)
            return slot

    @property
    def made(self) -> tuple[ExecutionSlot, ...]:
        """Every slot this pool made (free or in use)."""
        with self._lock:
            return tuple(self._made)

    def release(self, slot: ExecutionSlot) -> None:
        self._free.append(slot)

    def close(self) -> None:
        with self._lock:
            made, self._made = self._made, []
        self._free.clear()
        for slot in made:
            slot.close()
