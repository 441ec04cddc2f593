"""Scale-out on Ray: copyless runners (and pipelines) in Ray Data actors.

Needs the ``ray`` extra (``pip install "copyless[ray]"``). Layer: above ``runner``, beside
``apps``.

* :class:`Predictor`: the callable class for ``Dataset.map_batches``; each actor owns one
  Runner and one :class:`~copyless.Pipeline`: it decodes image paths straight into the
  engine's batch tensor (or takes frames of a column), overlapped with inference, across
  calls.
* :func:`decode_frames` / :class:`FrameSpec`: the decode stage, paths -> RGBx frames for a
  model whose preprocessing is folded in (``input_format="rgbx"``).
* :class:`ClassificationJob` / :class:`JobSettings`: the whole batch job behind
  ``copyless-batch`` (its dataset, or its result batches); :class:`ResultWriter` writes
  its Parquet. :class:`ReaderJob`: the same job with a callable class of the caller's in
  the actors, any rows out (``copyless-batch --task ocr``: the OCR layer's reader, which
  this layer, on the same floor, does not import); the same writers take its schema.
* :func:`local_ray` / :func:`join_cluster`: a quiet private Ray for one job, or a running
  cluster (failing fast when it is unreachable).
* :func:`plan_resources` / :func:`node_cpus`: actors and decode tasks fitted to the cluster
  before submitting (shrunk, or refused with :class:`PlanError`); :func:`watch` and
  :class:`StallError`: the watchdog that never lets a starved job wait in silence;
  :class:`JobControl`: stop a running job's sources (a signal handler) or cancel it, with
  no thread signalled.
"""

from __future__ import annotations

from ._cluster import ClusterError, ClusterInfo, check_reachable, join_cluster, local_ray
from ._control import JobControl, JobStopped
from ._frames import FrameSpec, decode_frames
from ._job import ClassificationJob, JobSettings, ReaderJob, gpus_per_actor
from ._manifest import Manifest, ManifestError
from ._plan import DECODE_CPUS, PlanError, ResourcePlan, node_cpus, plan_resources
from ._predictor import ModelSource, PredictionError, Predictor
from ._results import (
    SCHEMA,
    TASK_SCHEMAS,
    PartitionedWriter,
    ResultWriter,
    part_name,
    result_table,
    schema_for,
)
from ._watchdog import StallError, cluster_state, stall_message, watch

__all__ = [
    "DECODE_CPUS",
    "SCHEMA",
    "TASK_SCHEMAS",
    "ClassificationJob",
    "ClusterError",
    "ClusterInfo",
    "FrameSpec",
    "JobControl",
    "JobSettings",
    "JobStopped",
    "Manifest",
    "ManifestError",
    "ModelSource",
    "PartitionedWriter",
    "PlanError",
    "PredictionError",
    "Predictor",
    "ReaderJob",
    "ResourcePlan",
    "ResultWriter",
    "StallError",
    "check_reachable",
    "cluster_state",
    "decode_frames",
    "gpus_per_actor",
    "join_cluster",
    "local_ray",
    "node_cpus",
    "part_name",
    "plan_resources",
    "result_table",
    "schema_for",
    "stall_message",
    "watch",
]
