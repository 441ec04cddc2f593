"""The live page of a :class:`~._board.FrameBoard`: an HTTP server on the standard library's
``http.server.ThreadingHTTPServer`` (a thread per connection; no HTTP parsing of our own).

* ``/``: one HTML page, a tile per stream: its latest annotated frame (the MJPEG stream
  below) and its figures (FPS, p50/p99 decode-to-result latency, frames, drops), which the
  page's script reads from ``/stats.json`` twice a second.
* ``/stream/S.mjpg``: stream ``S``'s frames as MJPEG (``multipart/x-mixed-replace``), each
  part the latest JPEG; ``/stream/S.jpg``: one JPEG of its latest frame.
* ``/metrics``: the same figures in Prometheus' text format, the collector
  ``--metrics-port`` serves (:class:`~._metrics.StreamMetrics`).
* Anything else, or a stream the board does not have: 404.

A client that stops reading blocks only its own connection's thread, in a socket write that
gives up after :data:`SEND_TIMEOUT` seconds; it holds one JPEG meanwhile. Inference threads
never wait on the server: they only call :meth:`FrameBoard.publish`.
"""

from __future__ import annotations

import html
import json
import logging
import math
import re
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ...types import CopylessError
from ._board import FrameBoard
from ._figures import current_fps, stream_state
from ._metrics import StreamMetrics

logger = logging.getLogger(__name__)

#: Seconds a socket write may wait for a client that does not read before the server
#: drops that client.
SEND_TIMEOUT = 10.0
_STREAM = re.compile(r"^/stream/(\d+)\.(mjpg|jpg)$")
_BOUNDARY = "copyless-frame"


class ServeError(CopylessError):
    """The server cannot listen where it was asked to (bad address, port in use)."""


class BoardServer:
    """Serves ``board`` on ``host:port`` (port 0: one the system picks) from a thread.

    The socket is bound in the constructor (ServeError when it cannot be), so a caller
    learns of a bad address before it starts any work; :meth:`start` begins serving;
    :meth:`close` stops the server and closes its socket (the board stays open)."""

    def __init__(self, board: FrameBoard, host: str, port: int) -> None:
        self.board = board
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                        flags=socket.AI_PASSIVE)[0][0]  # fmt: skip
            self._server = _Server((host, port), family, board)
        except OSError as exc:  # socket.gaierror included
            raise ServeError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) the server listens on."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def start(self) -> None:
        """Serve from a daemon thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever,
                                            name="copyless-serve", daemon=True)  # fmt: skip
            self._thread.start()

    def close(self) -> None:
        """Stop serving and close the listening socket (idempotent); connections still open
        end when the board closes or their client goes."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> BoardServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a client still watching never holds the process up
    block_on_close = False

    def __init__(self, address: tuple[str, int], family: int, board: FrameBoard) -> None:
        self.address_family = family  # read by the base class when it makes the socket
        self.board = board
        self.metrics = StreamMetrics(board.figures, "the live page's /metrics")
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = SEND_TIMEOUT  # socket timeout: a client that stops reading is dropped
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # http.server's name
        path = self.path.partition("?")[0]
        board = self.server.board
        if path in ("/", "/index.html"):
            self._send(_page(board).encode(), "text/html; charset=utf-8")
        elif path == "/stats.json":
            self._send(json.dumps(_stats(board)).encode(), "application/json")
        elif path == "/metrics":
            self._send(*self.server.metrics.render())
        elif (match := _STREAM.match(path)) and int(match.group(1)) < len(board):
            if match.group(2) == "jpg":
                self._snapshot(int(match.group(1)))
            else:
                self._mjpeg(int(match.group(1)))
        else:
            self.send_error(HTTPStatus.NOT_FOUND, f"no such page: {path}")

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _snapshot(self, stream: int) -> None:
        jpeg = self.server.board.snapshot(stream, timeout=2.0)
        if jpeg is None:
            self.send_error(HTTPStatus.NOT_FOUND, f"stream {stream} has no frame yet")
        else:
            self._send(jpeg, "image/jpeg")

    def _mjpeg(self, stream: int) -> None:
        """Each newer JPEG of ``stream`` as one part, until the client or the board goes."""
        self.close_connection = True
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={_BOUNDARY}")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        board = self.server.board
        # Each part ends with the next boundary line, and a browser shows a part only once
        # the next one begins: the latest JPEG is sent again when nothing newer comes within
        # a second (the final frame after the inputs end; a keep-alive too).
        boundary = f"\r\n--{_BOUNDARY}\r\n".encode()
        jpeg: bytes | None = None
        try:
            self.wfile.write(boundary[2:])
            with board.watch(stream) as next_jpeg:
                while not board.closed:
                    jpeg = next_jpeg(1.0) or jpeg
                    if jpeg is not None:
                        head = f"Content-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n"
                        self.wfile.write(head.encode() + jpeg + boundary)
        except OSError as exc:  # the client went, or stopped reading (socket timeout)
            logger.debug("stream %d: client %s dropped: %s", stream, self.client_address, exc)

    def log_message(self, format: str, *args: Any) -> None:  # the base class's names
        logger.debug("%s %s", self.address_string(), format % args)


def _stats(board: FrameBoard) -> dict[str, Any]:
    """The figures per stream, and the page's own cost: JPEGs made and their CPU seconds."""
    return {
        "jpegs": board.encodes,
        "jpeg_cpu_seconds": round(board.encode_seconds, 4),
        "streams": [
            {
                "index": f.index,
                "source": f.source,
                "state": stream_state(f),
                "error": f.error,
                "frames": f.frames,
                "dropped": f.dropped,
                "fps": round(current_fps(f), 2),
                "mean_fps": round(f.fps, 2),
                "p50_ms": round(f.latency_p50 * 1000.0, 2),
                "p99_ms": round(f.latency_p99 * 1000.0, 2),
            }
            for f in board.figures()
        ],
    }


def _page(board: FrameBoard) -> str:
    tiles = "\n".join(
        f"<figure><figcaption>stream {i}: {html.escape(name)}</figcaption>"
        f'<img src="/stream/{i}.mjpg" alt="stream {i}">'
        f'<p class="stats" id="stats{i}">waiting for results</p></figure>'
        for i, name in enumerate(board.names)
    )
    columns = math.ceil(math.sqrt(len(board)))  # 4 streams: 2 x 2; 9: 3 x 3
    rows = math.ceil(len(board) / columns)
    return _PAGE.replace("{tiles}", tiles).replace("{columns}", str(columns)) \
        .replace("{rows}", str(rows))  # fmt: skip


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>copyless streams</title>
<style>
body { font: 14px sans-serif; margin: 8px; background: #111; color: #eee; }
main { display: grid; grid-template-columns: repeat({columns}, minmax(0, 1fr)); gap: 8px;
       max-width: calc({columns} * 660px); }
figure { margin: 0; background: #222; padding: 4px; }
figcaption { font-weight: bold; overflow: hidden; white-space: nowrap; }
img { width: 100%; height: calc((100vh - 16px) / {rows} - 56px); min-height: 120px;
      display: block; object-fit: contain; background: #000; }
.stats { margin: 4px 0 0; font-family: monospace; }
.failed { color: #f66; font-weight: bold; }
</style></head>
<body><main>
{tiles}
</main>
<script>
async function refresh() {
  try {
    const reply = await fetch("/stats.json", {cache: "no-store"});
    for (const s of (await reply.json()).streams) {
      const line = document.getElementById("stats" + s.index);
      const counts = `frames ${s.frames}  dropped ${s.dropped}`;
      if (s.state === "failed") {
        line.textContent = `FAILED after ${counts}: ${s.error}`;
        line.className = "stats failed";
      } else if (s.state === "ended") {
        line.textContent = `ended: ${s.mean_fps.toFixed(1)} FPS on average  ` +
          `p50 ${s.p50_ms.toFixed(1)} ms  p99 ${s.p99_ms.toFixed(1)} ms  ${counts}`;
      } else {
        line.textContent = `${s.fps.toFixed(1)} FPS  p50 ${s.p50_ms.toFixed(1)} ms  ` +
          `p99 ${s.p99_ms.toFixed(1)} ms  ${counts}`;
      }
    }
  } catch (e) { /* the server is gone: keep the last figures */ }
}
refresh();
setInterval(refresh, 500);
</script>
</body></html>
"""
