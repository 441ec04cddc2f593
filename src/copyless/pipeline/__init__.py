"""The pipeline layer: :class:`Pipeline`, the loop every application writes (items ->
prepare -> runner -> finish, ordered, bounded, overlapped) as one object, its
:class:`Result` per item, and the one owner of stage timing (:class:`StageClock`,
:class:`PipelineStats`) that the apps, ``copyless-bench`` and the live page read.

Above ``runner/`` (it drives a Runner's ``execute_async``), below ``vision/``, ``ocr/``,
``ray/`` and ``apps/``, which are built on it.
"""

from ._pipeline import CLOSE_TIMEOUT_S, Pipeline
from ._result import STAGES, Result
from ._slots import ItemTensors
from ._stats import WINDOW, PipelineStats, SourceStats, StageClock, StageStats

__all__ = [
    "CLOSE_TIMEOUT_S",
    "STAGES",
    "WINDOW",
    "Pipeline",
    "PipelineStats",
    "Result",
    "ItemTensors",
    "SourceStats",
    "StageClock",
    "StageStats",
]
