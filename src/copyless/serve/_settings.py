"""How a server runs its models: dynamic batching, queues, engines, request sizes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..types import OptionError, RunnerType
from ._access import Restriction

__all__ = ["DEFAULT_MAX_INFLIGHT_BYTES", "DEFAULT_MAX_REQUEST_BYTES", "ServeSettings"]

#: The largest request body (REST) or message (gRPC) taken by default, bytes.
DEFAULT_MAX_REQUEST_BYTES = 256 * 1024 * 1024
#: The bytes of requests held at once (being read, parsed or queued), by default.
DEFAULT_MAX_INFLIGHT_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """``max_queue_delay_ms``: how long a batch waits for more rows once it has one (Triton's
    ``max_queue_delay_microseconds``, in ms; 0: run what is there). ``max_queue_size``: rows
    waiting per model, at most (0: 8 batches); past it a request is refused with 503 /
    RESOURCE_EXHAUSTED. ``slots``: the model pipeline's jobs in flight (None: its default).
    ``runner_type`` and ``runner_options``: how each model's runner is created.
    ``max_request_bytes``: the largest request taken (413 / RESOURCE_EXHAUSTED past it; a
    model's own bound, from its inputs, is usually far lower). ``max_inflight_bytes``: the
    bytes of requests held at once, at most (503 / RESOURCE_EXHAUSTED past it; 0: no bound).
    ``max_image_bytes``: the memory one encoded image may take to decode (its header says;
    400 past it).

    Security (docs/serve.md): ``allow_client_shm`` opens client shared memory to TCP
    clients; ``http_restrictions`` / ``grpc_restrictions`` guard API groups with a header
    key (Triton's ``--http-restricted-api`` / ``--grpc-restricted-protocol``).
    Connections: ``header_timeout_s`` (REST: a request's headers must arrive within it, and an
    idle connection that sent nothing closes after it), ``body_timeout_s`` (REST: a body
    must arrive within it plus a second per MB), ``idle_timeout_s`` (gRPC: a connection with
    no call in flight closes after it), ``max_connections`` (per listener; 0: the descriptor
    budget's share).

    The repository (:mod:`._repository`): ``model_control`` (``none``, ``poll``,
    ``explicit``: Triton's modes), ``repository_poll_s`` (poll mode's period),
    ``load_models`` (explicit mode: the models loaded at start; ``*``: all)."""

    max_queue_delay_ms: float = 0.0
    max_queue_size: int = 0
    slots: int | None = None
    runner_type: RunnerType = RunnerType.VAIML
    runner_options: Mapping[str, Any] = field(default_factory=dict)
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES
    max_image_bytes: int = 512 * 1024 * 1024
    allow_client_shm: bool = False
    http_restrictions: tuple[Restriction, ...] = ()
    grpc_restrictions: tuple[Restriction, ...] = ()
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    idle_timeout_s: float = 300.0
    max_connections: int = 0
    model_control: str = "none"
    repository_poll_s: float = 15.0
    load_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        delay = self.max_queue_delay_ms
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not delay >= 0:
            raise OptionError(f"max_queue_delay_ms must be a number >= 0, got {delay!r}")
        if self.model_control not in ("none", "poll", "explicit"):
            raise OptionError(f"model_control must be none, poll or explicit, got "
                              f"{self.model_control!r}")  # fmt: skip
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s",
                     "repository_poll_s"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise OptionError(f"{name} must be a number > 0, got {value!r}")
        for name in ("max_queue_size", "max_request_bytes", "max_inflight_bytes",
                     "max_connections", "max_image_bytes"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise OptionError(f"{name} must be an int >= 0, got {value!r}")
        if self.slots is not None and (not isinstance(self.slots, int) or self.slots < 1):
            raise OptionError(f"slots must be an int >= 1 or None, got {self.slots!r}")

    def queue_size(self, batch: int) -> int:
        return self.max_queue_size or 8 * max(1, batch)
