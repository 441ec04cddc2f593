"""The one error a request can end in, and what each protocol calls it.

Every refusal is a :class:`RequestError` with a :class:`Refusal`: the REST layer answers its
HTTP status with ``{"error": message}`` (as Triton does, and ``tritonclient`` reads), the
gRPC layer aborts with its status code and the same message. Validation happens before any
resource is taken, so a refused request leaves nothing behind.
"""

from __future__ import annotations

import enum

from ..types import CopylessError

__all__ = ["Refusal", "RequestError"]


class Refusal(enum.Enum):
    """Why a request was refused: ``(HTTP status, gRPC status code name)``."""

    INVALID_ARGUMENT = (400, "INVALID_ARGUMENT")
    #: a restricted API without its key, or client shared memory where it is off
    FORBIDDEN = (403, "PERMISSION_DENIED")
    NOT_FOUND = (404, "NOT_FOUND")
    #: a body that did not arrive in time
    TIMEOUT = (408, "DEADLINE_EXCEEDED")
    ALREADY_EXISTS = (409, "ALREADY_EXISTS")
    TOO_LARGE = (413, "RESOURCE_EXHAUSTED")
    UNSUPPORTED = (400, "UNIMPLEMENTED")
    #: the model's queue, the bytes in flight or the descriptors are full: come back later
    #: (Triton answers 503 here too)
    EXHAUSTED = (503, "RESOURCE_EXHAUSTED")
    #: the model is loading or failed to, or the server is draining
    UNAVAILABLE = (503, "UNAVAILABLE")
    INTERNAL = (500, "INTERNAL")

    @property
    def http_status(self) -> int:
        return self.value[0]

    @property
    def grpc_code(self) -> str:
        """The name of the ``grpc.StatusCode`` member."""
        return self.value[1]


class RequestError(CopylessError):
    """A request the server refuses or could not complete; ``refusal`` says how to answer."""

    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.message = message

    @classmethod
    def invalid(cls, message: str) -> RequestError:
        return cls(Refusal.INVALID_ARGUMENT, message)

    @classmethod
    def not_found(cls, message: str) -> RequestError:
        return cls(Refusal.NOT_FOUND, message)
