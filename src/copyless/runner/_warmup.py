"""What ``Runner.warm_up`` does besides loading engines: first runs and worker threads.

An engine's first run allocates its arenas and caches (onnxruntime, OpenVINO), and a
``ThreadPoolExecutor`` starts a thread per submission until it has ``max_workers``: both
land on the first jobs unless done beforehand, as the prime phase of VART-ML's
``vart_infer_async`` does before its steady state.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence

from ..memory import NpuTensor
from ..model import CompiledModel
from ..types import NpuTensorInfo
from ._engine_set import EngineSet
from ._plan import build_plan
from ._slot import ExecutionSlot
from ._trace import Trace

logger = logging.getLogger(__name__)
_NO_TRACE = Trace(False, None)


def first_runs(
    model: CompiledModel,
    slots: Sequence[ExecutionSlot],
    allocate: Callable[[NpuTensorInfo], NpuTensor],
    memory: tuple[str, ...],
) -> int:
    """Run each slot once on zeros in runner-allocated buffers (on the devices ``memory``
    names, as the runner binds them); returns the runs done.

    Skipped (0) for a model whose outputs depend on the data (their buffers have no fixed
    size) and where an engine refuses zeros (logged at DEBUG: warming up is best effort).
    """
    specs = (*model.inputs, *model.outputs)
    if any(spec.dynamic or -1 in spec.hw.shape for spec in specs):
        return 0
    try:
        inputs = [[allocate(spec.hw) for spec in model.inputs]]
        outputs = [[allocate(spec.hw) for spec in model.outputs]]
        plan = build_plan(model.inputs, model.outputs, model.batch_size, inputs, outputs, memory)
    except Exception as exc:  # noqa: BLE001 - warming up is best effort
        logger.debug("no warm-up runs (the first jobs will pay instead): %s", exc)
        return 0
    done = 0
    for slot in slots:
        try:
            slot.run(plan, _NO_TRACE, "warm-up")
            done += 1
        except Exception as exc:  # noqa: BLE001 - a warm-up run that fails changes nothing
            logger.debug("warm-up run failed (the first job will pay instead): %s", exc)
    return done


def prime(
    model: CompiledModel,
    engines: EngineSet,
    runs: int,
    allocate: Callable[[NpuTensorInfo], NpuTensor],
) -> None:
    """One first run on each of ``runs`` async slots and one sync slot (made now if need
    be), all given back to their pools afterwards."""
    pools = [engines.async_slots()] * runs + [engines.sync_slots]
    slots = [(pool, pool.acquire()) for pool in pools]
    try:
        first_runs(model, [slot for _, slot in slots], allocate, engines.memory)
    finally:
        for pool, slot in slots:
            pool.release(slot)


def start_workers(executor: concurrent.futures.ThreadPoolExecutor, count: int) -> None:
    """Make ``executor`` start ``count`` threads now: ``count`` tasks that wait for each
    other each take a thread of their own."""
    if count < 1:
        return
    meet = threading.Barrier(count)

    def arrive() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            meet.wait(10.0)

    concurrent.futures.wait([executor.submit(arrive) for _ in range(count)], timeout=30.0)
