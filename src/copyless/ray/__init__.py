"""Scale-out on Ray: copyless runners in Ray Data actors, frames from the object store.

Needs the ``ray`` extra (``pip install "copyless[ray]"``). Layer: above ``runner``, beside
``apps``.

* :class:`Predictor`: the callable class for ``Dataset.map_batches``; each actor owns one
  Runner, binds the incoming (read-only, object-store) frames in place and keeps several
  jobs in flight.
* :func:`decode_frames` / :class:`FrameSpec`: the decode stage, paths -> RGBx frames for a
  model whose preprocessing is folded in (``input_format="rgbx"``).
* :class:`ClassificationJob` / :class:`JobSettings`: the whole batch job behind
  ``copyless-batch`` (its dataset, or its result batches); :class:`ResultWriter` writes
  its Parquet.
* :func:`local_ray` / :func:`join_cluster`: a quiet private Ray for one job, or a running
  cluster (failing fast when it is unreachable).
"""

from __future__ import annotations

from ._cluster import ClusterError, ClusterInfo, check_reachable, join_cluster, local_ray
from ._frames import FrameSpec, decode_frames
from ._job import ClassificationJob, JobSettings, gpus_per_actor
from ._predictor import ModelSource, PredictionError, Predictor
from ._results import SCHEMA, ResultWriter

__all__ = [
    "SCHEMA",
    "ClassificationJob",
    "ClusterError",
    "ClusterInfo",
    "FrameSpec",
    "JobSettings",
    "ModelSource",
    "PredictionError",
    "Predictor",
    "ResultWriter",
    "check_reachable",
    "decode_frames",
    "gpus_per_actor",
    "join_cluster",
    "local_ray",
]
