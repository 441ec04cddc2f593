"""A chain of models served as one: a repository entry whose ``config.pbtxt`` names a chain
backend takes one encoded page (``page`` ``BYTES [1]``: a JPEG, PNG or WebP file) and answers
what the chain makes of it:

* ``backend: "copyless-ocr"``: the OCR chain (:mod:`._chain_ocr`), its lines;
* ``backend: "copyless-crops"``: a detector and a classifier of its crops, both compiled
  models in the entry's folder (:mod:`._chain_crops`), its objects and their classes.

This module owns what every chain shares with a served model: pages are read one after the
other by the chain, its stages overlapped across pages where it has them; a request waits
in a bounded queue (503 past it), may carry a timeout, and is dropped before it is read
when its client leaves. An unreadable page is its request's 400; the chain and the other
requests go on. Metrics, readiness and retirement are a served model's.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..pipeline import Result
from ..vision import ReadLimit
from ._admit import ModelShape
from ._chain_crops import CROPS_BACKEND, open_crops
from ._chain_ocr import OCR_BACKEND, open_ocr
from ._chain_work import ChainWork
from ._errors import Refusal, RequestError
from ._images import BYTES, ImageInput, check_images
from ._layout import ModelPolicy
from ._metrics import ServeMetrics
from ._model import Lifecycle, ModelRetired, ModelState
from ._regions import RegionTable
from ._request import InferRequest, InferResponse, OutputWish, ResponseTensor
from ._settings import ServeSettings
from ._tensors import ServedTensor

__all__ = ["CHAIN_BACKENDS", "CROPS_BACKEND", "OCR_BACKEND", "ServedChain"]

logger = logging.getLogger(__name__)

_Opener = Callable[[Path, Mapping[str, str], ReadLimit], ChainWork]
#: backend name -> how its chain opens (folder, config parameters, decode limit)
_OPENERS: dict[str, _Opener] = {OCR_BACKEND: open_ocr, CROPS_BACKEND: open_crops}
CHAIN_BACKENDS = tuple(_OPENERS)
_PAGE = ServedTensor("page", BYTES, np.dtype(np.uint8), (1,), (1,), False)


@dataclass(slots=True)
class _Page:
    request: InferRequest
    data: bytes | memoryview
    wishes: dict[str, OutputWish]
    future: concurrent.futures.Future[InferResponse]
    received: float
    deadline: float | None


class ServedChain(Lifecycle):
    """A chain as one served model (see the module docstring); the repository keeps it as
    it keeps a :class:`~._model.ServedModel`. ``policy.backend`` names the chain."""

    def __init__(self, name: str, path: Path, settings: ServeSettings, metrics: ServeMetrics,
                 version: str = "1", policy: ModelPolicy | None = None) -> None:  # fmt: skip
        self.name, self.path, self.version = name, path, version
        self.policy = policy or ModelPolicy(backend=OCR_BACKEND)
        self.backend = self.policy.backend or OCR_BACKEND
        self._settings, self._metrics = settings, metrics
        self._state, self._reason = ModelState.LOADING, "loading"
        self.inputs: list[ServedTensor] = [_PAGE]
        self.outputs: list[ServedTensor] = []
        self.max_batch_size = 0
        self._work: ChainWork | None = None
        self._limit = ReadLimit(settings.max_image_bytes, "the server allows an image "
                                "(--max-image-mb)")  # fmt: skip
        self._queue: collections.deque[_Page] = collections.deque()
        self._taken: collections.deque[_Page] = collections.deque()
        self._capacity = self.policy.max_queue_size or settings.queue_size(1)
        self._cond = threading.Condition()
        self._closing = self._retired = False
        self._consumer: threading.Thread | None = None
        self.images: dict[str, ImageInput] = {}  # none decoded into a tensor: the chain's own
        self._shape = ModelShape(name, version, self.inputs, self.outputs, 0,
                                 encoded=frozenset({"page"}))  # fmt: skip
        metrics.add_model(name, version)

    # -- state (Lifecycle's) ---------------------------------------------------------------
    @property
    def engine(self) -> str:
        return self.backend

    @property
    def precision(self) -> str:
        return ""  # the chain's models say theirs in their own records

    # -- loading -------------------------------------------------------------------------
    def load(self) -> None:
        """Open the chain and read one drawn page through it (every model compiled and
        warm); a failure leaves it UNAVAILABLE with the reason."""
        try:
            work = _OPENERS[self.backend](self.path, dict(self.policy.parameters), self._limit)
        except Exception as exc:  # noqa: BLE001 - the state carries it
            self._set_state(ModelState.UNAVAILABLE, f"failed to load: {exc}")
            return
        try:
            work.warm()
        except Exception as exc:  # noqa: BLE001 - the state carries it
            work.close()
            self._set_state(ModelState.UNAVAILABLE, f"failed to load: {exc}")
            return
        self._work = work
        self.outputs = list(work.outputs)
        self._shape = ModelShape(self.name, self.version, self.inputs, self.outputs, 0,
                                 encoded=frozenset({"page"}))  # fmt: skip
        self._consumer = threading.Thread(target=self._consume, args=(work,), daemon=True,
                                          name=f"copyless-serve-{self.name}")  # fmt: skip
        self._consumer.start()
        self._set_state(ModelState.READY)

    # -- requests ------------------------------------------------------------------------
    def submit(self, request: InferRequest, regions: RegionTable
               ) -> concurrent.futures.Future[InferResponse]:  # fmt: skip
        self.check_ready()
        try:
            page = self._admit(request)
        except RequestError:
            self._metrics.request_failed(self.name, self.version, "OTHER", 0.0)
            raise
        with self._cond:
            refusal: RequestError | None = None
            if self._retired:
                refusal = ModelRetired(Refusal.UNAVAILABLE, f"model {self.name!r} is being "
                                       "replaced")  # fmt: skip
            elif self._closing:
                refusal = RequestError(Refusal.UNAVAILABLE, "the server is shutting down")
            elif len(self._queue) >= self._capacity:
                refusal = RequestError(Refusal.EXHAUSTED, f"model {self.name!r} is busy: "
                                       f"{len(self._queue)} pages wait; retry later")
            else:
                self._queue.append(page)
                self._cond.notify_all()
        if refusal is not None:
            if not isinstance(refusal, ModelRetired):
                self._metrics.request_failed(self.name, self.version, "REJECTED", 0.0)
            raise refusal
        self._metrics.pending(self.name, self.version, +1)
        return page.future

    def _admit(self, request: InferRequest) -> _Page:
        if request.uses_regions:
            raise RequestError(Refusal.UNSUPPORTED, f"model {self.name!r} takes its page as "
                               "BYTES data, not from shared memory")  # fmt: skip
        if [t.name for t in request.inputs] != ["page"]:
            raise RequestError.invalid(f"model {self.name!r} takes one input, 'page' (BYTES "
                                       "[1]: a JPEG, PNG or WebP file)")  # fmt: skip
        (given,) = request.inputs
        if given.datatype != BYTES or tuple(given.shape) not in ((1,), (1, 1)) \
                or given.elements is None or len(given.elements) != 1:  # fmt: skip
            raise RequestError.invalid(f"input 'page': one encoded image, BYTES [1], as binary "
                                       f"data; got {given.datatype} {list(given.shape)}")
        check_images(given.elements, self._limit, "input 'page'")
        known = {t.name for t in self.outputs}
        wishes = {w.name: w for w in request.outputs or [OutputWish(n) for n in sorted(known)]}
        for name, wish in wishes.items():
            if name not in known:
                names = ", ".join(repr(t.name) for t in self.outputs)
                raise RequestError.invalid(f"model {self.name!r} has no output {name!r}; its "
                                           f"outputs are {names}")  # fmt: skip
            if wish.shm is not None:
                raise RequestError(Refusal.UNSUPPORTED, f"output {name!r}: written into the "
                                   "response only (its size depends on the page)")
        now = time.perf_counter()
        timeout = self.policy.timeout_us(request.timeout_us)
        return _Page(request, given.elements[0], wishes, concurrent.futures.Future(), now,
                     now + timeout / 1e6 if timeout else None)  # fmt: skip

    def _pages(self) -> Iterator[bytes | memoryview]:
        """The chain's source: queued pages, until it drains; a page past its deadline or
        whose client left is answered here instead of read."""
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                page = self._queue.popleft()
            if page.future.cancelled():
                self._answered(page, "CANCELED")
                continue
            if page.deadline is not None and time.perf_counter() > page.deadline:
                self._fail(page, RequestError(Refusal.TIMEOUT, "Request timeout expired"),
                           "REJECTED")  # fmt: skip
                continue
            with self._cond:
                self._taken.append(page)
            yield page.data

    def _consume(self, work: ChainWork) -> None:
        try:
            for result in work.map(self._pages()):
                with self._cond:
                    page = self._taken.popleft()
                self._resolve(page, result)
        except Exception as exc:
            logger.error("model %r stopped: %s", self.name, exc, exc_info=exc)
            self._set_state(ModelState.UNAVAILABLE, f"stopped: {exc}")
        finally:
            with self._cond:
                self._closing = True
                left = [*self._taken, *self._queue]
                self._taken.clear()
                self._queue.clear()
            for page in left:
                self._fail(page, RequestError(Refusal.UNAVAILABLE, f"model {self.name!r} "
                                              "stopped"), "OTHER")  # fmt: skip

    def _resolve(self, page: _Page, result: Result) -> None:
        if result.error is not None:
            self._fail(page, RequestError.invalid(f"input 'page': {result.error}"), "OTHER")
            return
        assert self._work is not None
        answer = self._work.answer(result.value)
        data = answer.outputs
        response = InferResponse(self.name, self.version, page.request.id)
        for tensor in self.outputs:
            wish = page.wishes.get(tensor.name)
            if wish is not None:
                array = data[tensor.name]
                response.outputs.append(ResponseTensor(tensor, array.shape, array, wish))
        self._metrics.row(self.name, self.version, 0.0, answer.stages)
        self._metrics.batch(self.name, self.version, 1)
        if page.future.done():  # cancelled meanwhile
            self._answered(page, "CANCELED")
            return
        self._answered(page, None)  # counted before the caller can read the metrics
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            page.future.set_result(response)

    def _fail(self, page: _Page, error: RequestError, reason: str) -> None:
        self._answered(page, "CANCELED" if page.future.done() else reason)  # counted first
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            page.future.set_exception(error)

    def _answered(self, page: _Page, reason: str | None) -> None:
        self._metrics.answered(self.name, self.version, page.received, reason)

    # -- metadata ------------------------------------------------------------------------
    def metadata(self, versions: list[str] | None = None) -> dict[str, Any]:
        def tensors(served: list[ServedTensor]) -> list[dict[str, Any]]:
            return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                    for t in served]  # fmt: skip

        return {"name": self.name, "versions": versions or [self.version],
                "platform": self.backend, "inputs": tensors(self.inputs),
                "outputs": tensors(self.outputs)}  # fmt: skip

    def config(self) -> dict[str, Any]:
        def tensors(served: list[ServedTensor]) -> list[dict[str, Any]]:
            return [{"name": t.name, "dims": list(t.shape), "data_type":
                     "TYPE_STRING" if t.datatype == BYTES else f"TYPE_{t.datatype}"}
                    for t in served]  # fmt: skip

        return {"name": self.name, "platform": self.backend, "backend": self.backend,
                "max_batch_size": 0, "input": tensors(self.inputs),
                "output": tensors(self.outputs),
                "parameters": {k: {"string_value": v}
                               for k, v in sorted(self.policy.parameters)}}  # fmt: skip

    # -- the end -------------------------------------------------------------------------
    def retire(self) -> None:
        with self._cond:
            self._retired = True

    def drain(self, timeout_s: float) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._state is ModelState.READY:
            self._set_state(ModelState.UNLOADING, "the server is shutting down")
        if self._consumer is not None:
            self._consumer.join(timeout_s)
        if self._work is not None:
            self._work.close()

