"""Detection ahead of recognition, across page sizes, on a thread of its own.

A detector pipeline is compiled for one input size, so the pages are cut into runs of one
size (:class:`SameSize`) and each run is one pipeline's ``map``. Pulled from the reader's
thread, a run ended when the reader took its last page: the next page's detection started
only after that page was recognised, and a folder of pages of mixed sizes (scans, photos,
turned pages) ran detect, recognise, detect, recognise with no overlap at all.
:class:`DetectAhead` pulls the runs on its own thread instead, into a queue of
:data:`AHEAD` pages, so the next page is decoded and detected while this one is recognised,
whatever its size.

Nothing is copied here: the queue holds the detector's results (the decoded page and its
quads, plain arrays no tensor aliases).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import cast

from ..pipeline import Pipeline, Result
from ._stages import PageItem

__all__ = ["AHEAD", "DetectAhead", "SameSize"]

#: Detected pages waiting for recognition at most (beside those in the detector's slots).
AHEAD = 1
_POLL_S = 0.05
#: how long leaving a map early waits for the detection thread
CLOSE_S = 5.0
logger = logging.getLogger(__name__)
Size = tuple[int, int]
#: What the thread hands over: a detector's result, a page unreadable before any size was
#: known (no detector), or the exception that ended the thread.
Found = tuple[Pipeline, Result] | tuple[None, PageItem] | BaseException


class SameSize:
    """Runs of consecutive pages that share a detector input size: ``(size, pages)`` pairs,
    lazily (each run is one detector pipeline's ``map``). A page that could not be read
    joins the run it is in (its detector ``prepare`` raises its error); those before the
    first readable page form a run of size None. Ends early once ``stopped()``."""

    def __init__(self, pages: Iterator[PageItem], stopped: Callable[[], bool]) -> None:
        self._pages = pages
        self._stopped = stopped
        self._held: PageItem | None = None  # the first page of the next run

    def _take(self) -> PageItem | None:
        if self._stopped():
            return None
        if self._held is not None:
            page, self._held = self._held, None
            return page
        return next(self._pages, None)

    def __iter__(self) -> Iterator[tuple[Size | None, Iterator[PageItem]]]:
        while True:
            first = self._take()
            if first is None:
                return
            size = first.plan.size if first.plan is not None else None
            yield size, self._run(first, size)

    def _run(self, first: PageItem, size: Size | None) -> Iterator[PageItem]:
        yield first
        while (page := self._take()) is not None:
            if page.plan is not None and page.plan.size != size:
                self._held = page
                return
            yield page


class DetectAhead:
    """The detector's results for ``pages`` (cut into runs of one size, taken until
    ``stopped()``), in order, detected on a thread of its own up to
    :data:`AHEAD` pages ahead of the reader (``detector(size)`` opens a size's pipeline,
    on that thread). Iterate once; leaving the loop early (or :meth:`close`) ends the
    thread: the run in progress is stopped, its pages detected so far are dropped.

    Items: ``(pipeline, result)``, or ``(None, page)`` for a page that could not be read
    before any size was known. An exception on the thread (opening a detector: compiling,
    loading) is raised by the iteration."""

    def __init__(
        self,
        pages: Iterator[PageItem],
        stopped: Callable[[], bool],
        detector: Callable[[Size], Pipeline],
        on_current: Callable[[Pipeline | None], None],
    ) -> None:
        self._cancel = threading.Event()
        self._runs = SameSize(pages, lambda: stopped() or self._cancel.is_set())
        self._detector = detector
        self._on_current = on_current  # the pipeline stop() must reach
        self._queue: queue.Queue[Found | None] = queue.Queue(maxsize=AHEAD)
        self._thread = threading.Thread(target=self._detect, name="copyless-ocr-detect",
                                        daemon=True)  # fmt: skip

    def __iter__(self) -> Iterator[tuple[Pipeline, Result] | tuple[None, PageItem]]:
        self._thread.start()
        try:
            while (found := self._queue.get()) is not None:
                if isinstance(found, BaseException):
                    raise found
                yield found
        finally:
            self.close()

    def close(self) -> None:
        """End the thread (idempotent): the pages detected and not yet taken are dropped.
        Waits up to :data:`CLOSE_S` for it (a page in detection, or a source that blocks
        for its next page: the thread ends once it returns, taking no further page)."""
        self._cancel.set()
        deadline = time.monotonic() + CLOSE_S
        while self._thread.is_alive() and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=_POLL_S)  # a put waiting for room sees the cancel
        if self._thread.is_alive():
            logger.debug("the detection thread is still busy after %.0f s; it ends on its own",
                         CLOSE_S)  # fmt: skip

    def _detect(self) -> None:
        try:
            for size, pages in self._runs:
                if size is None:  # unreadable pages before the first readable one
                    for page in pages:
                        self._put((None, page))
                    continue
                self._run(self._detector(size), pages)
                if self._cancel.is_set():
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
            self._put(exc)
            return
        self._put(None)

    def _run(self, detector: Pipeline, pages: Iterator[PageItem]) -> None:
        self._on_current(detector)
        results = cast(Generator[Result, None, None], detector.map(pages))
        try:
            for found in results:
                if not self._put((detector, found)):
                    return
        finally:
            results.close()  # an early end stops the run's jobs before the pipeline is reused
            self._on_current(None)

    def _put(self, item: Found | None) -> bool:
        """Queue ``item`` once there is room; False once cancelled."""
        while not self._cancel.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
            except queue.Full:
                continue
            return True
        return False
