"""A batch classification job on Ray Data: image paths in, one result row per image out.

The dataset is paths -> an actor pool of :class:`~copyless.ray.Predictor` (one Runner and
one Pipeline per actor) that decodes each image in the actor, straight into its row of the
engine's batch tensor, overlapped with inference (``decode="actor"``, the default). Each
actor takes two calls at once (``max_concurrent_calls_per_actor=2``), so the engine does
not drain between batches. No frame crosses the object store: Ray Data moves only paths
and results.

``decode="tasks"`` keeps the standard Ray Data batch-inference shape instead: paths -> a
decode stage (:func:`~copyless.ray.decode_frames`, Ray tasks) -> the actors, the frames
reaching them through the object store (read-only views, ``zero_copy_batch``; copied once
into the engine's batch tensor). The paths are cut into blocks of whole batches so that no
batch straddles two blocks (which would make Ray Data concatenate, i.e. copy, it).

Faults: Ray Data restarts a dead actor and retries the batches it held (the output has
each image once); an image that cannot be read gives a row with an ``error``.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import ray
import ray.data

from ..model import CompiledModel
from ..types import OptionError, RunnerType
from ._cluster import ClusterError, ClusterInfo
from ._control import JobControl
from ._frames import FrameSpec, decode_frames
from ._manifest import Manifest
from ._plan import DECODE_CPUS, ResourcePlan
from ._predictor import Predictor
from ._watchdog import STALL_S, StallError, watch

#: Upper bound on the blocks the path list is cut into (each is one decode task).
MAX_BLOCKS = 4096
#: How long a stalled run waits for Ray Data's executor to wind down (seconds).
EXECUTOR_JOIN_S = 60.0
#: Where images are decoded: in the Predictor actors, or in a stage of Ray tasks before them.
DECODE_MODES = ("actor", "tasks")
#: Calls an actor runs at once (the next batch's rows join its pipeline while this one ends).
CALLS_PER_ACTOR = 2

Batch = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True, slots=True)
class JobSettings:
    """How a job runs: ``actors`` Predictor actors taking batches of ``batch_size`` frames
    with ``in_flight`` jobs each, on ``runner_type`` and ``device`` ("cpu", "cuda",
    "tensorrt"),
    returning the ``top_k`` classes of each image. ``cpus_per_actor`` is what each actor
    reserves from Ray, ``decode_cpus`` what each decode task does (see
    :func:`~copyless.ray.plan_resources` and :meth:`planned`); with ``device="cuda"``, GPUs
    are shared out by :func:`gpus_per_actor`. ``max_image_bytes``: the memory one decoded
    image may take (a larger one is an error row; None: no bound). ``stall_s``: the
    watchdog's time without a result batch before it asks the cluster what it waits for
    (see :func:`run`).
    """

    actors: int = 1
    batch_size: int = 32
    top_k: int = 5
    runner_type: RunnerType = RunnerType.VAIML
    device: str = "cpu"
    in_flight: int = 2
    cpus_per_actor: float = 1.0
    decode_cpus: float = DECODE_CPUS
    stall_s: float = STALL_S
    decode: str = "actor"
    max_image_bytes: int | None = None
    #: None: classify (``top_k``); "detect" / "segment": the rows of the model's task
    task: str | None = None

    def __post_init__(self) -> None:
        for name in ("actors", "batch_size", "top_k", "in_flight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OptionError(f"{name} must be an int >= 1, got {value!r}")
        if self.task not in (None, "detect", "segment"):
            raise OptionError(f"task must be None, 'detect' or 'segment', got {self.task!r}")
        if self.task is not None and self.decode != "actor":
            raise OptionError("a detect/segment job decodes in the actors (decode='actor'): "
                              "they map each image's answer back to its pixels")  # fmt: skip
        if self.decode not in DECODE_MODES:
            raise OptionError(f"decode must be 'actor' or 'tasks', got {self.decode!r}")
        if self.device not in ("cpu", "cuda", "tensorrt"):
            raise OptionError(f"device must be 'cpu', 'cuda' or 'tensorrt', got {self.device!r}")
        if self.device != "cpu" and self.runner_type is RunnerType.OPENVINO:
            raise OptionError(f"device {self.device!r} runs on the onnxruntime runner")
        for name in ("cpus_per_actor", "decode_cpus", "stall_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise OptionError(f"{name} must be > 0, got {value!r}")

    def planned(self, plan: ResourcePlan) -> JobSettings:
        """These settings with the actors and CPUs of ``plan``."""
        return dataclasses.replace(
            self,
            actors=plan.actors,
            cpus_per_actor=plan.cpus_per_actor,
            decode_cpus=plan.decode_cpus,
        )


def gpus_per_actor(settings: JobSettings, cluster: ClusterInfo) -> float:
    """The GPU share each actor asks Ray for: 0 on CPU; with ``device`` "cuda" or
    "tensorrt" the cluster's GPUs spread over the actors (fractional when actors outnumber
    GPUs, at most one each). Raises :class:`ClusterError` when the cluster has no GPU."""
    if settings.device == "cpu":
        return 0.0
    if cluster.gpus < 1:
        raise ClusterError(
            f"--device {settings.device}: the Ray cluster at {cluster.address} has no GPU "
            f"({cluster.cpus:g} CPUs on {cluster.nodes} node(s))"
        )
    return min(1.0, math.floor(cluster.gpus) / settings.actors)


@dataclass(frozen=True, slots=True)
class ClassificationJob:
    """Classify ``paths`` (a list, or a :class:`~copyless.ray.Manifest` its workers read)
    with ``model`` as ``settings`` say; ``gpus`` is each actor's GPU
    share (:func:`gpus_per_actor`); ``predictor`` may be a subclass of :class:`Predictor`
    adding columns of its own. Needs a connected Ray (``ray.init``,
    :func:`~copyless.ray.local_ray`, ...) to run."""

    paths: Sequence[str] | Manifest
    model: CompiledModel
    settings: JobSettings = JobSettings()
    gpus: float = 0.0
    predictor: type[Predictor] = Predictor

    @property
    def actors(self) -> int:
        """The actors the job starts: the settings', no more than the batches it has to give
        them (each costs a start-up, and Ray Data warns of a pool larger than its input)."""
        return _actors(self.paths, self.settings)

    def dataset(self) -> ray.data.Dataset:
        """The lazy dataset: one row per path with ``path``, ``error``, ``class_id``,
        ``score``, ``top_class_ids``, ``top_scores``. The model travels to the actors
        through the object store."""
        settings = self.settings
        ds = _path_dataset(self.paths, settings.batch_size, "a classification job")
        decode: dict[str, Any] = {"decode": "path", "max_image_bytes": settings.max_image_bytes}
        if settings.decode == "tasks":
            ds = ds.map_batches(
                decode_frames,
                fn_kwargs={"spec": FrameSpec.for_model(self.model, settings.max_image_bytes)},
                batch_size=settings.batch_size,
                batch_format="numpy",
                num_cpus=settings.decode_cpus,
            )
            decode = {}
        else:
            FrameSpec.for_model(self.model)  # an input the actors cannot decode into: now
        ds = ds.map_batches(
            self.predictor,
            fn_constructor_kwargs={
                "model": ray.put(self.model),  # once into the object store, not per actor
                "top_k": None if settings.task else settings.top_k,
                "task": settings.task,
                "runner_type": settings.runner_type,
                "options": {"device": settings.device},
                "in_flight": settings.in_flight,
                **decode,
            },
            compute=ray.data.ActorPoolStrategy(
                size=self.actors,
                max_concurrent_calls_per_actor=CALLS_PER_ACTOR,
                enable_true_multi_threading=True,  # the calls share the actor's pipeline
            ),
            batch_size=settings.batch_size,
            batch_format="numpy",
            zero_copy_batch=True,
            num_cpus=settings.cpus_per_actor,
            num_gpus=self.gpus or None,
        )
        return _quiet(ds)

    def run(self, control: JobControl | None = None) -> Iterator[Batch]:
        """Run the job; yield result batches (numpy columns) as they complete, in
        completion order. Raises :class:`~copyless.ray.StallError` when no batch has come
        for ``settings.stall_s`` seconds while Ray has demands it cannot place (the
        execution is cancelled, its actors released). ``control.stop()`` (from a signal
        handler, say) stops the sources: the batches running still come out, then the
        iteration ends."""
        yield from _run(self.dataset(), self.settings.stall_s, control)


@dataclass(frozen=True, slots=True)
class ReaderJob:
    """Run ``reader``, a callable class of the caller's, over ``paths`` (a list, or a
    :class:`~copyless.ray.Manifest`): each of ``settings.actors`` actors constructs it once
    with ``reader_kwargs`` and calls it with batches of ``settings.batch_size`` paths (a
    ``path`` column of numpy strings); whatever rows it returns (numpy columns, any number
    of rows per path) are the job's result batches. The rest is :class:`ClassificationJob`'s:
    the same dataset of paths, :meth:`run` with the same watchdog and
    :class:`~copyless.ray.JobControl`, and the rows written by a
    :class:`~copyless.ray.ResultWriter` given their ``schema``. This is how a layer beside
    this one runs as a job without being imported here (``copyless-batch --task ocr``:
    :class:`copyless.ocr.OcrBatchReader`). One call at a time per actor: the reader need
    not be thread-safe."""

    paths: Sequence[str] | Manifest
    reader: type[Any]
    reader_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    settings: JobSettings = JobSettings()
    gpus: float = 0.0

    @property
    def actors(self) -> int:
        """As :attr:`ClassificationJob.actors`."""
        return _actors(self.paths, self.settings)

    def dataset(self) -> ray.data.Dataset:
        """The lazy dataset: paths -> the readers' rows."""
        settings = self.settings
        ds = _path_dataset(self.paths, settings.batch_size, "a reader job")
        ds = ds.map_batches(
            self.reader,
            fn_constructor_kwargs=dict(self.reader_kwargs),
            compute=ray.data.ActorPoolStrategy(size=self.actors),
            batch_size=settings.batch_size,
            batch_format="numpy",
            num_cpus=settings.cpus_per_actor,
            num_gpus=self.gpus or None,
        )
        return _quiet(ds)

    def run(self, control: JobControl | None = None) -> Iterator[Batch]:
        """As :meth:`ClassificationJob.run`: the readers' batches as they complete."""
        yield from _run(self.dataset(), self.settings.stall_s, control)


def _actors(paths: Sequence[str] | Manifest, settings: JobSettings) -> int:
    if isinstance(paths, Manifest) or not paths:
        return settings.actors
    batches = math.ceil(len(paths) / settings.batch_size)
    return max(1, min(settings.actors, batches))


def _path_dataset(paths: Sequence[str] | Manifest, batch_size: int, what: str
                  ) -> ray.data.Dataset:  # fmt: skip
    """One ``path`` column: a manifest's (read by Ray's workers), or the list's in blocks of
    whole batches."""
    if isinstance(paths, Manifest):
        paths.check()
        return paths.dataset()
    if not paths:
        raise OptionError(f"{what} needs at least one path")
    return ray.data.from_arrow(_path_blocks(paths, batch_size))


def _run(ds: ray.data.Dataset, stall_s: float, control: JobControl | None) -> Iterator[Batch]:
    """The result batches of ``ds`` as they complete, under the watchdog and ``control``."""
    control = control or JobControl()
    batches = control.attach(ds).iter_batches(batch_size=None, batch_format="numpy")
    try:
        yield from watch(iter(batches), stall_s, cancel=control.fail)
    except StallError:
        _join_executor_threads()
        raise


def _join_executor_threads(timeout_s: float = EXECUTOR_JOIN_S) -> None:
    """Wait for Ray Data's executor threads to end: a stalled run's shutdown waits only 2 s
    for them, and one still running when the driver disconnects dies with a traceback."""
    deadline = time.monotonic() + timeout_s
    for thread in threading.enumerate():
        if thread.name.startswith("StreamingExecutor"):
            thread.join(max(0.0, deadline - time.monotonic()))


def _path_blocks(paths: Sequence[str], batch_size: int) -> list[pa.Table]:
    """Blocks holding a whole number of batches each, at most :data:`MAX_BLOCKS` of them."""
    batches = math.ceil(len(paths) / batch_size)
    per_block = batch_size * max(1, math.ceil(batches / MAX_BLOCKS))
    column = np.asarray(paths, dtype=object)
    return [
        pa.table({"path": pa.array(column[start : start + per_block], pa.string())})
        for start in range(0, len(paths), per_block)
    ]


def _quiet(ds: ray.data.Dataset) -> ray.data.Dataset:
    """``ds`` without Ray Data's progress bars and start-of-execution line (the driver
    prints its own progress)."""
    ds.context.enable_progress_bars = False
    ds.context.print_on_execution_start = False
    return ds
