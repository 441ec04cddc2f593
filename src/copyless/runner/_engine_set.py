"""The engines of one runner and the execution slots over them.

Two sets. The sync set is loaded by the factory, before the runner exists. The async set
exists only where a backend's engine threads belong to a loaded engine
(``Capabilities.threads_per_engine``, onnxruntime): concurrent jobs on one session would each
take every core, so async jobs get engines of their own with cores / ``max_concurrent_runs``
threads each. Those are loaded by ``warm_up()`` (or the ``warm_up`` option) or else by the
first ``execute_async``, so sync-only users keep every core and pay nothing. Elsewhere
(OpenVINO: the streams of one compiled model serve every request) async jobs share the sync
engines, with slots of their own.

Engine start-up lives here and nowhere else: making ``execute_async`` start the async set
in the background, or giving a backend native async requests, changes this part only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from ..backends import Engine, common_memory
from ..model import CompiledModel
from ..types import StatusCode
from ._jobs import Job, SyncCall
from ._log import RunnerLog
from ._slot import ExecutionSlot
from ._slots import ExecutionSlots


class EngineSet:
    """Sync and async engines, their slot pools, and their release at shutdown."""

    def __init__(
        self,
        model: CompiledModel,
        engines: Sequence[Engine],
        async_loader: Callable[[], list[Engine]] | None,
        log: RunnerLog,
    ) -> None:
        self._model = model
        self._log = log
        self._engines = list(engines)  # every engine loaded, closed at shutdown
        # The devices whose memory every engine binds in place (declared by the backends).
        self.memory = common_memory([engine.capabilities for engine in engines])
        self.sync_slots = ExecutionSlots(model, engines)
        self._async_loader = async_loader
        self._async_slots: ExecutionSlots | None = None  # set once the async engines are loaded
        self._lock = threading.Lock()
        self._closed = False

    @property
    def own_async_engines(self) -> bool:
        """Whether async jobs get engines of their own (loaded or not yet)."""
        return self._async_loader is not None

    @property
    def loaded(self) -> tuple[Engine, ...]:
        """The engines loaded so far, sync then async."""
        return tuple(self._engines)

    @property
    def slots_made(self) -> tuple[ExecutionSlot, ...]:
        """Every execution slot made so far, sync then async."""
        pools = [self.sync_slots, self._async_slots]
        return tuple(slot for pool in pools if pool is not None for slot in pool.made)

    def slots_for(self, caller: Job | SyncCall) -> ExecutionSlots:
        """The pool a call runs from: async jobs on the async engines once loaded."""
        if isinstance(caller, Job) and self._async_slots is not None:
            return self._async_slots
        return self.sync_slots

    def async_slots(self) -> ExecutionSlots:
        return self._async_slots if self._async_slots is not None else self.sync_slots

    def load_async(self) -> StatusCode | None:
        """Load the async jobs' engines once; the status to refuse a job with on failure
        (logged), None when they are ready or the backend needs none."""
        loader = self._async_loader
        if loader is None or self._async_slots is not None:
            return None
        with self._lock:
            if self._async_slots is not None:
                return None
            try:
                engines = loader()
            except MemoryError:
                self._log.exception("execute_async: out of memory loading the async engines")
                return StatusCode.OUT_OF_MEMORY
            except Exception as exc:  # noqa: BLE001 - execution never raises
                self._log.error("execute_async: cannot load the async engines: %s", exc)
                return StatusCode.RUNTIME_ERROR
            if self._closed:
                for engine in engines:
                    engine.close()
                return StatusCode.FAILURE
            self._engines.extend(engines)
            self._async_slots = ExecutionSlots(self._model, engines)
            return None

    def stop_loading(self) -> None:
        """No engine is loaded from now on (the runner is closing)."""
        with self._lock:
            self._closed = True

    def close(self) -> None:
        """Release every slot, then every engine (nothing may run on them any more)."""
        with self._lock:
            self._closed = True
            pools = [self.sync_slots, self._async_slots]
            engines, self._engines = self._engines, []
        for pool in pools:
            if pool is not None:
                pool.close()
        for engine in engines:
            engine.close()
