"""``copyless.Pipeline``: items -> prepare -> runner -> finish, ordered, bounded, overlapped.

::

    def prepare(path, inputs):                 # inputs: this item's HW input tensors
        classify_preprocess(decode(path), inputs[0])

    def finish(path, outputs):                 # outputs: valid during the call only
        return softmax_topk(outputs[0], 1)[0]

    with cl.Pipeline(runner, prepare, finish) as pipeline:
        for result in pipeline.map(paths):     # in the order of paths
            print(result.item, result.value if result.ok else result.error)

The loop OpenVINO's ``AsyncInferQueue`` and Ray Data's ``map_batches`` own for their users,
as one object: items are pulled only as slots free up, ``slots`` jobs overlap the engine
with ``prepare`` and ``finish`` of the items around them, results come back in order, one
failed item is one error result, and leaving the loop early stops it cleanly.

Copies: none by the pipeline at batch 1 (``prepare`` writes into the slot's tensors, or
returns tensors of its own that are bound in place). At ``batch > 1`` tensors ``prepare``
returns are copied into its row of the batch (one copy each), and a batch shorter than the
model's is gathered by the runner.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..memory import NpuTensor
from ..runner import Runner
from ..types import OptionError, RunnerClosedError
from ._feeds import DirectFeed, Feed, SourceFeed
from ._result import STAGES, Result
from ._run import Run
from ._slots import ItemTensors, JobSlot, allocate
from ._stats import ItemCounts, PipelineStats, StageClock

logger = logging.getLogger(__name__)

#: How long close() (and leaving an iteration early) waits for the jobs running.
CLOSE_TIMEOUT_S = 1.0


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionError(f"{name} must be an int >= 1, got {value!r}")
    return value


class Pipeline:
    """Runs ``prepare`` -> the runner -> ``finish`` over items (see the module docstring).

    ``prepare(item, inputs) -> None | list[NpuTensor]``: write one item into ``inputs``
    (the runner's HW input tensors for this item, one per model input: views of row
    ``inputs.row`` of the slot's batch tensors), or return the item's own tensors to bind
    instead (zero-copy at batch 1, e.g. a decoder's planes; copied into the row at batch > 1).
    ``finish(item, outputs) -> value``: read the item's output tensors (row
    ``outputs.row``; a data-dependent output is the whole batch's, shared by its rows) and
    return what its :class:`Result` carries; the tensors are reused once it returns.
    Both may run on worker threads, several at once but never two for the same slot.

    ``slots``: jobs (of ``batch`` items each) in flight at most; default the runner's
    ``max_concurrent_runs`` + 1 (one being prepared while the engine holds the others).
    ``batch``: items per job, at most the model's batch size (a batch shorter than the
    model's is gathered by the runner: compile for the batch you run). ``batch_wait_ms``:
    with ``batch > 1``, how long a job waits for a fuller batch once it has an item.

    Raises :class:`OptionError` for a bad argument, :class:`UnsupportedError` for a model
    whose tensors a pipeline cannot allocate, :class:`RunnerClosedError` for a closed runner.
    """

    def __init__(
        self,
        runner: Runner,
        prepare: Callable[[Any, ItemTensors], Sequence[NpuTensor] | None],
        finish: Callable[[Any, ItemTensors], Any],
        *,
        slots: int | None = None,
        batch: int = 1,
        batch_wait_ms: float = 0.0,
    ) -> None:
        if not isinstance(runner, Runner):
            raise OptionError(f"runner must be a copyless Runner, got {type(runner).__name__}")
        for name, fn in (("prepare", prepare), ("finish", finish)):
            if not callable(fn):
                raise OptionError(f"{name} must be callable, got {type(fn).__name__}")
        batch = _positive("batch", batch)
        model_batch = runner.get_batch_size()  # RunnerClosedError on a closed runner
        if batch > model_batch:
            raise OptionError(f"batch={batch} exceeds the model's batch size {model_batch}")
        if batch < model_batch:
            logger.warning("batch=%d on a model compiled for batch %d: every job is gathered "
                           "into a batch of %d (a copy, and idle rows)", batch, model_batch,
                           model_batch)  # fmt: skip
        if slots is None:
            slots = runner.options.max_concurrent_runs + 1
        slots = _positive("slots", slots)
        if isinstance(batch_wait_ms, bool) or not isinstance(batch_wait_ms, (int, float)) \
                or not batch_wait_ms >= 0:  # fmt: skip
            raise OptionError(f"batch_wait_ms must be a number >= 0, got {batch_wait_ms!r}")
        self._runner = runner
        self._prepare, self._finish = prepare, finish
        self._batch, self._wait_s = batch, float(batch_wait_ms) / 1000.0
        self._slots: list[JobSlot] = allocate(runner, slots, batch)
        self._clock = StageClock(("source", *STAGES))
        self._counts = ItemCounts()
        self._lock = threading.Lock()
        self._run: Run | None = None
        self._closed = False

    @property
    def runner(self) -> Runner:
        return self._runner

    @property
    def slots(self) -> int:
        return len(self._slots)

    @property
    def batch(self) -> int:
        return self._batch

    @property
    def closed(self) -> bool:
        return self._closed

    # -- iteration -----------------------------------------------------------------------
    def map(self, items: Iterable[Any]) -> Iterator[Result]:
        """One :class:`Result` per item, in the order of ``items``, pulled lazily as slots
        free up (an endless generator is fine). Iteration starts on the first ``next()``.

        At ``batch > 1`` jobs are full batches (but the last) unless ``batch_wait_ms > 0``:
        then a reader thread pulls the items and a job that has waited that long for a full
        batch goes out short. Otherwise the worker that takes the items pulls them."""
        self._check_open()
        iterator = iter(items)
        if self._batch == 1 or self._wait_s == 0:
            return self._iterate(lambda: DirectFeed(iterator, self._clock))
        return self._iterate(lambda: SourceFeed({None: iterator}, self._depth(), self._clock))

    def map_sources(self, sources: Mapping[Any, Iterable[Any]]) -> Iterator[Result]:
        """Results of many sources (streams) at once: each source pulled by its own thread,
        taken round robin, batched across sources at ``batch > 1`` (waiting at most
        ``batch_wait_ms`` for a fuller batch); order kept within each source, not across.
        ``Result.source`` is the source's key."""
        self._check_open()
        if not isinstance(sources, Mapping):
            raise OptionError(f"sources must be a mapping of name -> iterable, "
                              f"got {type(sources).__name__}")  # fmt: skip
        iterators = {key: iter(source) for key, source in sources.items()}
        return self._iterate(lambda: SourceFeed(iterators, self._depth(), self._clock))

    def _depth(self) -> int:
        """Items queued per source: enough for a batch, and one more."""
        return self._batch + 1

    def _iterate(self, feed: Callable[[], Feed]) -> Iterator[Result]:
        # A generator: the run starts on the first next(), and leaving the loop early (break,
        # an exception, KeyboardInterrupt, or the iterator being dropped) closes it.
        run = self._begin(feed)
        try:
            while True:
                result = run.next()
                if result is None:
                    return
                yield result
        finally:
            run.close(CLOSE_TIMEOUT_S)
            with self._lock:
                if self._run is run:
                    self._run = None

    def _begin(self, feed: Callable[[], Feed]) -> Run:
        with self._lock:
            self._check_open()
            if self._run is not None:
                raise RuntimeError("this pipeline is already iterating: finish (or leave) "
                                   "that loop first, or use a second Pipeline")  # fmt: skip
            self._run = Run(self._runner, self._slots, feed(), self._prepare, self._finish,
                            self._batch, self._wait_s, self._clock, self._counts)  # fmt: skip
            return self._run

    # -- control -------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop pulling items: the iteration delivers the items already taken, then ends
        (what a SIGINT handler calls). Safe from any thread and from a signal handler."""
        run = self._run
        if run is not None:
            run.stop()

    def stats(self) -> PipelineStats:
        """Items done and failed (in all and per source), per stage p50/p99 seconds, items
        per second (see :class:`PipelineStats`)."""
        run = self._run
        return self._counts.snapshot(self._clock.snapshot(), run.in_flight if run else 0)

    def close(self) -> None:
        """Stop pulling items, let running jobs end (at most ~1 s), free every slot. The
        runner stays usable; the pipeline cannot be used again. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            run, self._run = self._run, None
        if run is not None:
            run.close(CLOSE_TIMEOUT_S)
        for slot in self._slots:
            slot.close()
        self._slots = []

    def _check_open(self) -> None:
        if self._closed:
            raise RunnerClosedError("this pipeline is closed")

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"<Pipeline slots={len(self._slots)} batch={self._batch} "
                f"on {self._runner!r} {state}>")  # fmt: skip
