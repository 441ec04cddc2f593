"""``copyless-video --serve``: the frame board and its server, bound before any other work,
and the wait for SIGINT/SIGTERM after the inputs end (:mod:`._board`, :mod:`._page`)."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Sequence

from ...types import Address, CopylessError
from ._board import FrameBoard, Published
from ._figures import Figures
from ._page import BoardServer


class LivePage:
    """The live page of streams ``names`` on ``address``; the app hands it results with
    :meth:`publish` (no copy, no encoding on the caller's thread) and says where the figures
    come from with :meth:`show_figures`. ServeError when the address cannot be bound."""

    def __init__(self, names: Sequence[str], address: Address, rate: float) -> None:
        self._figures: Callable[[], Sequence[Figures]] = tuple
        self.board = FrameBoard(names, lambda: self._figures(), rate=rate)
        try:
            self.server = BoardServer(self.board, address.host, address.port)
        except CopylessError:
            self.board.close()
            raise

    @classmethod
    def open(cls, names: Sequence[str], address: Address, rate: float) -> LivePage:
        """Bind, start serving and say where on stderr."""
        page = cls(names, address, rate)
        page.server.start()
        print(f"serving {page.server.url}", file=sys.stderr, flush=True)
        return page

    def show_figures(self, figures: Callable[[], Sequence[Figures]]) -> None:
        """Read each stream's figures from ``figures()`` (called on the server's threads)."""
        self._figures = figures

    def publish(self, result: Published) -> None:
        self.board.publish(result)

    def serve_until_signal(self) -> None:
        """Keep serving the final frames and figures until SIGINT or SIGTERM (the signals'
        handlers are restored after)."""
        stop = threading.Event()
        handlers = {sig: signal.signal(sig, lambda *_: stop.set())
                    for sig in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
        try:
            print(f"inputs done; serving {self.server.url} until SIGINT/SIGTERM",
                  file=sys.stderr, flush=True)  # fmt: skip
            while not stop.wait(0.5):
                pass
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def close(self) -> None:
        """Stop the server, then the board (its watchers' connections end)."""
        self.server.close()
        self.board.close()
