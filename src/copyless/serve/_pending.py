"""A request admitted to a model's queue: its rows, where each input row comes from and
each output row goes, and the future its caller awaits.

A request of ``k`` rows is ``k`` items of the model's pipeline (:class:`RowItem`); the rows
of one request may land in different jobs. Each row counts itself done (``finish`` on a
pipeline worker) or failed (the pipeline's result, on the model's consumer thread); the
last one resolves the future, so a request is answered as soon as its last row is out.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._errors import Refusal, RequestError
from ._images import ImageInput
from ._regions import SharedRegion
from ._request import InferRequest, InferResponse, OutputWish, ResponseTensor
from ._tensors import ServedTensor

__all__ = ["InputSource", "OutputTarget", "PendingRequest", "RowItem", "flat_bytes"]


def flat_bytes(array: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, as a writable-if-it-is memoryview (no copy)."""
    if not array.flags.c_contiguous:
        raise RequestError(Refusal.INTERNAL, "a tensor row is not contiguous")
    return array.reshape(-1).view(np.uint8).data


@dataclass(slots=True)
class InputSource:
    """Where an input's rows come from: ``array`` (``[rows, row elements]``), ``region``
    at ``offset`` (row ``r`` at ``offset + r * row_bytes``) or ``images`` (encoded, row ``r``
    decoded into its row by ``decoder``)."""

    tensor: ServedTensor
    array: np.ndarray | None = None
    region: SharedRegion | None = None
    offset: int = 0
    images: Sequence[bytes | memoryview] | None = None  # encoded, one a row
    decoder: ImageInput | None = None


@dataclass(slots=True)
class OutputTarget:
    """Where an output's rows go: ``array`` (allocated per request), ``region`` (and the
    ``capacity`` bytes the client gave), or nowhere (not asked for)."""

    tensor: ServedTensor
    wish: OutputWish | None
    array: np.ndarray | None = None
    region: SharedRegion | None = None
    offset: int = 0
    capacity: int = 0
    shape: tuple[int, ...] = ()


class PendingRequest:
    """One admitted request (see the module docstring)."""

    def __init__(self, request: InferRequest, version: str, rows: int,
                 inputs: Sequence[InputSource], outputs: Sequence[OutputTarget],
                 regions: Sequence[SharedRegion]) -> None:  # fmt: skip
        self.request, self.version, self.rows = request, version, rows
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.future: concurrent.futures.Future[InferResponse] = concurrent.futures.Future()
        self.received = time.perf_counter()
        #: when its rows stop being worth running (perf_counter; None: never)
        self.deadline: float | None = None
        self._regions = list(regions)
        self._left = rows
        self._error: RequestError | None = None
        self._lock = threading.Lock()

    @property
    def abandoned(self) -> bool:
        """The caller gave up (a cancelled RPC, a gone client): its rows cost nothing more."""
        return self.future.cancelled()

    def row_done(self) -> bool:
        return self._count(None)

    def row_failed(self, error: BaseException) -> bool:
        return self._count(_as_serve_error(error))

    def _count(self, error: RequestError | None) -> bool:
        """Count a row; True when it was the last: the caller records the request's metrics,
        then calls :meth:`resolve` (so a client that reads the metrics once answered finds
        its request counted)."""
        with self._lock:
            if error is not None and self._error is None:
                self._error = error
            self._left -= 1
            return self._left == 0

    def resolve(self) -> None:
        """Answer the caller (once every row is counted) and give back the regions."""
        for region in self._regions:
            region.release()
        self._regions = []
        if self.future.done():  # cancelled
            return
        try:
            if self._error is not None:
                self.future.set_exception(self._error)
            else:
                self.future.set_result(self._response())
        except concurrent.futures.InvalidStateError:  # cancelled meanwhile
            pass

    def release(self) -> None:
        """Give back the regions of a request that was never queued."""
        for region in self._regions:
            region.release()
        self._regions = []

    def _response(self) -> InferResponse:
        request = self.request
        response = InferResponse(request.model, self.version, request.id)
        for target in self.outputs:
            if target.wish is None:
                continue
            shape = target.shape or target.tensor.request_shape(self.rows)
            data = None if target.array is None else target.array.reshape(shape)
            response.outputs.append(ResponseTensor(target.tensor, shape, data, target.wish))
        return response


def _as_serve_error(error: BaseException) -> RequestError:
    if isinstance(error, RequestError):
        return error
    return RequestError(Refusal.INTERNAL, f"inference failed: {error}")


@dataclass(slots=True)
class RowItem:
    """Row ``row`` of ``request``: one item of the model's pipeline."""

    request: PendingRequest
    row: int
    queued_at: float
