"""How a server runs its models: dynamic batching, queues, engines, request sizes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..types import OptionError, RunnerType

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "ServeSettings"]

#: The largest request body (REST) or message (gRPC) taken by default, bytes.
DEFAULT_MAX_REQUEST_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """``max_queue_delay_ms``: how long a batch waits for more rows once it has one (Triton's
    ``max_queue_delay_microseconds``, in ms; 0: run what is there). ``max_queue_size``: rows
    waiting per model, at most (0: 8 batches); past it a request is refused with 503 /
    RESOURCE_EXHAUSTED. ``slots``: the model pipeline's jobs in flight (None: its default).
    ``runner_type`` and ``runner_options``: how each model's runner is created.
    ``max_request_bytes``: the largest request taken (413 / RESOURCE_EXHAUSTED past it)."""

    max_queue_delay_ms: float = 0.0
    max_queue_size: int = 0
    slots: int | None = None
    runner_type: RunnerType = RunnerType.VAIML
    runner_options: Mapping[str, Any] = field(default_factory=dict)
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES

    def __post_init__(self) -> None:
        delay = self.max_queue_delay_ms
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not delay >= 0:
            raise OptionError(f"max_queue_delay_ms must be a number >= 0, got {delay!r}")
        for name in ("max_queue_size", "max_request_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise OptionError(f"{name} must be an int >= 0, got {value!r}")
        if self.slots is not None and (not isinstance(self.slots, int) or self.slots < 1):
            raise OptionError(f"slots must be an int >= 1 or None, got {self.slots!r}")

    def queue_size(self, batch: int) -> int:
        return self.max_queue_size or 8 * max(1, batch)
