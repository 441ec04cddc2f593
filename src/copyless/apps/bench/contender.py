"""What every measured contender (one way of running the model) is: a name, a family, a
mode and ``run(batches)``.

``run(n)`` processes ``n`` batches of the photo end to end (decode and preprocess every
frame, infer, postprocess every frame) and returns the :class:`~.tasks.Outcome` of frame 0
of the last batch. A sync pipeline is timed call by call with ``run(1)``; an async one over
``run(n)`` (prime, steady state, drain), so the time per frame is wall / (n * batch).

A pipeline with a :class:`~.stages.Stopwatch` (``watch``) takes a lap after each stage of
each batch, for the per-stage breakdown; the laps cost two ``perf_counter`` calls a stage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .stages import Stopwatch
from .tasks import Outcome

PLAIN = "plain"
FAMILY_PLAIN, FAMILY_PEER, FAMILY_COPYLESS, FAMILY_LIMIT = "plain", "peer", "copyless", "limit"


def _nothing() -> None:
    return None


@dataclass(slots=True)
class Contender:
    """One way of running the model on the photo (see the module docstring)."""

    name: str
    family: str
    asynchronous: bool
    run: Callable[[int], Outcome]
    close: Callable[[], None] = field(default=_nothing)
    note: str = ""
    watch: Stopwatch | None = None
    engine: str = ""  # "ort" | "ov": whose engine-alone row is this pipeline's limit
