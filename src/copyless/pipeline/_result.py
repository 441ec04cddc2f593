"""One item's outcome: :class:`Result`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The stages every result is timed in, seconds: ``prepare`` (the user's prepare),
#: ``wait`` (from the item leaving its source to its job's submission, prepare excluded:
#: waiting for a slot, a fuller batch or the runner's capacity), ``infer`` (submission to
#: the job's end) and ``finish`` (the user's finish).
STAGES = ("prepare", "wait", "infer", "finish")


@dataclass(frozen=True, slots=True)
class Result:
    """What :meth:`Pipeline.map` / :meth:`Pipeline.map_sources` yield for one item.

    ``value`` is what ``finish`` returned (None when the item failed); ``error`` is None or
    the exception that the item's source, ``prepare`` or ``finish`` raised, or a
    :class:`~copyless.types.JobError` carrying the runner's status. ``source`` is the
    source's key (None for ``map``), ``index`` the item's 0-based position in its source.
    ``timings`` maps each stage of :data:`STAGES` to seconds (0.0 for a stage the item
    never reached).
    """

    item: Any
    value: Any = None
    error: BaseException | None = None
    source: Any = None
    index: int = 0
    timings: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the item went through without an error."""
        return self.error is None

    def unwrap(self) -> Any:
        """The value, or the item's error raised (a loop that wants to stop at the first
        failure: ``for r in pipeline.map(items): use(r.unwrap())``)."""
        if self.error is not None:
            raise self.error
        return self.value

    def __repr__(self) -> str:
        where = f"{self.source!r}[{self.index}]" if self.source is not None else f"[{self.index}]"
        what = f"error={self.error!r}" if self.error is not None else f"value={self.value!r}"
        return f"<Result {where} {what}>"
