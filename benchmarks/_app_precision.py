"""The app benchmarks' ``--precision`` (video.py, ray_batch.py): the classifier copyless runs
at fp32 or at a reduced precision, and its agreement with the plain fp32 peer.

* ``fp32``: the app's own built-in EfficientNet-Lite0 (no ``-m``: what a user gets).
* ``int8`` / ``fastest``: the same zoo model compiled as the apps compile their built-in one
  (RGBx input, the zoo's preprocessing record, the app's batch size) with
  ``precision="int8"`` or ``"fastest"``, calibrated on :data:`CALIBRATION` seeded variants of
  real photos (``_accuracy_data.variants``: crops, scales, aspect changes, mirrors, JPEG
  qualities of scikit-image's photos, greyscale ones among them, as a user's folder holds
  them), then run with ``-m``. The calibration folder and the compiled model live in the
  zoo's one locked cache (``zoo.compiled``): built once, then a cache hit for every round
  and every later run.

Agreement is what a user of the reduced model gives up: the share of frames or photos whose
top-1 is the plain fp32 peer's top-1, overall and on those the peer is sure of (top-1
probability >= :data:`SURE`). The peer's fp32 is the reference on both sides of the ratio.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from copyless.model import load_model, precision_line, zoo
from copyless.model.zoo import cache_root

PRECISIONS = ("fp32", "int8", "fastest")
CLASSIFIER = "efficientnet-lite0"
#: calibration variants and their seed (benchmarks/int8.py's defaults; its test crops use
#: seed + 19, the frames and photos timed here are other images again)
CALIBRATION, SEED = 128, 7
SURE = 0.3


def calibration_folder(count: int = CALIBRATION, seed: int = SEED) -> Path:
    """``count`` calibration JPEGs (``_accuracy_data.variants``) in the cache, written once:
    into a temporary folder renamed into place, so a folder under the final name is whole."""
    folder = cache_root() / "bench" / f"calibration-{count}-s{seed}"
    if folder.is_dir():
        return folder
    from _accuracy_data import variants

    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        for i, variant in enumerate(variants(count, seed)):
            (tmp / f"{i:04d}-{variant.photo}.jpg").write_bytes(variant.jpeg)
        tmp.rename(folder)
    except OSError:
        if not folder.is_dir():  # not another process's folder finished first: a failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def classifier(precision: str, *, batch_size: int = 1, max_drop: float | None = None,
               calibration: int = CALIBRATION) -> Path | None:  # fmt: skip
    """The compiled classifier copyless runs at ``precision`` (None for fp32: the app's own
    built-in), calibrated on ``calibration`` photos; compiled on first use (NNCF on 128
    photos: a minute or more), then cached."""
    if precision == "fp32":
        return None
    # the real path: the artifact's key holds it, and a test session's cache root links
    # to the user's calibration folder under a path of its own
    folder = calibration_folder(calibration).resolve()
    options: dict[str, Any] = {"input_format": "rgbx", **zoo.compile_options(CLASSIFIER),
                               "precision": precision, "calibration": str(folder)}  # fmt: skip
    if batch_size != 1:
        options["batch_size"] = batch_size
    if max_drop is not None:
        options["max_drop"] = max_drop
    return zoo.compiled(CLASSIFIER, options, prefix=f"{CLASSIFIER}-rgbx-{precision}")


def record_line(model: Path | None) -> str:
    """What the compiler measured for ``model`` (its precision line), or that it is fp32."""
    if model is None:
        return "precision: fp32 (the app's built-in model)"
    line = precision_line(load_model(model).metadata)
    return line or f"precision: fp32 ({model.name}: the compiler kept fp32)"


@dataclass(frozen=True, slots=True)
class Agreement:
    """Top-1 of copyless against the plain fp32 peer's, on the same frames or photos."""

    same: int
    total: int
    sure_same: int
    sure_total: int

    @classmethod
    def of(cls, ours: Mapping[Any, int], theirs: Mapping[Any, tuple[int, float]]) -> Agreement:
        """``ours``: top-1 per key; ``theirs``: the peer's (top-1, its probability) per key.
        Keys present on one side only are counted as disagreeing."""
        keys = set(ours) | set(theirs)
        same = {key for key in keys if key in ours and key in theirs
                and ours[key] == theirs[key][0]}  # fmt: skip
        sure = {key for key in keys if key in theirs and theirs[key][1] >= SURE}
        return cls(len(same), len(keys), len(same & sure), len(sure))

    @property
    def share(self) -> float:
        return self.same / self.total if self.total else 0.0

    @property
    def sure_share(self) -> float | None:
        return self.sure_same / self.sure_total if self.sure_total else None

    def line(self, what: str) -> str:
        sure = "-" if self.sure_share is None else f"{100 * self.sure_share:.1f}%"
        return (f"top-1 as the plain fp32 on {100 * self.share:.1f}% of {self.total} {what}, "
                f"{sure} of the {self.sure_total} it is sure of (p >= {SURE})")  # fmt: skip

    def figures(self) -> dict[str, Any]:
        """For a JSON record."""
        sure = self.sure_share
        return {"agreement %": round(100 * self.share, 1),
                "agreement sure %": None if sure is None else round(100 * sure, 1),
                "sure": f"{self.sure_total}/{self.total}"}  # fmt: skip


def worst(agreements: Sequence[Agreement]) -> Agreement:
    """The round that agreed least (the outputs are deterministic: normally all equal)."""
    return min(agreements, key=lambda a: (a.share, a.sure_share or 0.0))
