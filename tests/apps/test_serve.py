"""The live page's server over a frame board fed with decoded video frames: the page, MJPEG,
/metrics parsed by prometheus-client, 404s, clients that go or never read, bad addresses,
and the page in headless Chromium with four tiles."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from board_helpers import StreamMeter
from browser_helpers import needs_chromium, screenshot, shows_a_frame, tiles
from copyless.apps.video._board import FrameBoard
from copyless.apps.video._page import BoardServer, ServeError
from copyless.types import parse_address
from copyless.vision._video import VideoFrame, VideoSource
from video_helpers import make_clip

SCENES = ("chelsea", "coffee", "astronaut", "coffee")


@dataclass(frozen=True)
class Shown:
    stream: int
    frame: VideoFrame
    banner: str
    boxes: tuple[()] = ()

    def rgb(self) -> np.ndarray:
        return self.frame.frame.to_ndarray(format="rgb24")


class Player:
    """Plays decoded clips into a board, one result per stream every ``period`` seconds,
    looping, as the video app would, with a meter per stream."""

    def __init__(self, clips: list[Path], period: float = 0.02) -> None:
        self.frames = []
        for clip in clips:
            with VideoSource(clip) as source:
                self.frames.append(list(source.frames()))
        self.meters = [StreamMeter(i, clip.name) for i, clip in enumerate(clips)]
        # this process is mostly idle: a CPU budget of 2% of it would leave few JPEGs
        self.board = FrameBoard([c.name for c in clips], self.figures, rate=10.0, cpu_share=1.0)
        self.period, self.published = period, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play)

    def figures(self) -> list[object]:
        return [m.figures() for m in self.meters]

    def _play(self) -> None:
        while not self._stop.is_set():
            for stream, frames in enumerate(self.frames):
                frame = frames[self.published % len(frames)]
                decoded = time.perf_counter()
                self.board.publish(Shown(stream, frame, f"{frame.index}: {SCENES[stream]}"))
                self.meters[stream].record(decoded - 0.004 * (stream + 1), time.perf_counter())
            self.published += 1
            time.sleep(self.period)

    def __enter__(self) -> Player:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.board.close()


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("serve")
    return [make_clip(folder / f"{name}{i}.mp4", 240, 320, 6, (name,))
            for i, name in enumerate(SCENES)]  # fmt: skip


@pytest.fixture
def served(clips: list[Path]) -> Iterator[tuple[Player, str]]:
    with Player(clips) as player, BoardServer(player.board, "127.0.0.1", 0) as server:
        server.start()
        yield player, server.url


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def _mjpeg_parts(url: str, count: int) -> list[bytes]:
    """The first ``count`` JPEGs of an MJPEG reply, then the connection is dropped."""
    with urllib.request.urlopen(url, timeout=30) as reply:
        boundary = reply.headers.get_param("boundary")
        assert reply.headers.get_content_type() == "multipart/x-mixed-replace" and boundary
        parts: list[bytes] = []
        assert reply.readline() == f"--{boundary}\r\n".encode()
        while len(parts) < count:
            headers = {}
            while (line := reply.readline().strip()) != b"":
                key, _, value = line.decode().partition(":")
                headers[key.lower()] = value.strip()
            assert headers["content-type"] == "image/jpeg"
            parts.append(reply.read(int(headers["content-length"])))
            assert reply.readline() == b"\r\n" and reply.readline() == f"--{boundary}\r\n".encode()
    return parts


def test_page_has_a_tile_per_stream(served: tuple[Player, str]) -> None:
    _, url = served
    status, kind, body = _get(url)
    page = body.decode()
    assert status == 200 and kind.startswith("text/html")
    for i, name in enumerate(SCENES):
        assert f'src="/stream/{i}.mjpg"' in page and f"{name}{i}.mp4" in page
    assert 'src="/stream/4.mjpg"' not in page


def test_stats_and_metrics_give_the_same_figures(served: tuple[Player, str]) -> None:
    _, url = served
    time.sleep(0.5)
    _, kind, body = _get(url + "stats.json")
    stats = json.loads(body)["streams"]
    assert kind == "application/json" and [s["index"] for s in stats] == [0, 1, 2, 3]
    status, kind, body = _get(url + "metrics")
    assert status == 200 and kind.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    frames = {s.labels["stream"]: s.value for s in families["copyless_video_frames"].samples
              if s.name.endswith("_total")}  # fmt: skip
    assert set(frames) == {"0", "1", "2", "3"}
    for s in stats:  # counted before /metrics was read: never more than there
        assert 0 < s["frames"] <= frames[str(s["index"])]
    latency = families["copyless_video_latency_seconds"]
    p50 = {(s.labels["stream"], s.labels["quantile"]): s.value for s in latency.samples}
    for stream in range(4):  # the player's latencies: 4 ms per stream index, plus publishing
        assert 0.004 * (stream + 1) <= p50[(str(stream), "0.5")] < 0.004 * (stream + 1) + 0.05
        assert p50[(str(stream), "0.99")] >= p50[(str(stream), "0.5")]
    fps = {s.labels["stream"]: s.value for s in families["copyless_video_fps"].samples}
    assert all(v > 1.0 for v in fps.values())
    dropped = families["copyless_video_dropped"].samples
    assert {s.value for s in dropped if s.name.endswith("_total")} == {0.0}


def test_mjpeg_gives_newer_frames_of_the_right_stream(served: tuple[Player, str]) -> None:
    player, url = served
    for stream in (0, 2):
        parts = _mjpeg_parts(url + f"stream/{stream}.mjpg", 4)
        # the stream moves on (a part repeats only as the keep-alive, after a second with
        # nothing newer: a loaded machine)
        assert len(set(parts)) >= 2
        image = np.asarray(Image.open(io.BytesIO(parts[-1])).convert("RGB"))
        assert image.shape == (240, 320, 3)
        below_banner = slice(40, None)
        error = min(  # the frame it shows: the closest of the stream's (they pan)
            np.abs(image[below_banner].astype(int) - rgb[below_banner]).mean()
            for rgb in (f.frame.to_ndarray(format="rgb24") for f in player.frames[stream])
        )
        assert error < 8
    status, kind, body = _get(url + "stream/1.jpg")
    assert status == 200 and kind == "image/jpeg" and body[:2] == b"\xff\xd8"


def test_unknown_pages_and_streams_are_404(served: tuple[Player, str]) -> None:
    player, url = served
    for path in ("stream/4.mjpg", "stream/99.jpg", "stream/x.mjpg", "nothing", "stream/0.png"):
        status, _, _ = _get(url + path)
        assert status == 404, path
    before = player.published
    time.sleep(0.3)
    assert player.published > before  # publishing went on


def test_a_client_that_disconnects_mid_stream(served: tuple[Player, str]) -> None:
    player, url = served
    address = parse_address(url.split("/")[2])
    for _ in range(3):  # read a little of the stream, then hang up mid-JPEG
        with socket.create_connection((address.host, address.port), timeout=10) as client:
            client.sendall(b"GET /stream/0.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
    time.sleep(0.5)
    assert len(_mjpeg_parts(url + "stream/0.mjpg", 2)) == 2  # the server serves on
    deadline = time.monotonic() + 5
    while player.board._tiles[0].watchers and time.monotonic() < deadline:
        time.sleep(0.1)
    assert player.board._tiles[0].watchers == 0  # every dropped client stopped watching


def test_a_client_that_never_reads(served: tuple[Player, str]) -> None:
    """The stuck client's thread blocks in its own socket write; publishing, other clients
    and the board's memory are unaffected."""
    player, url = served
    address = parse_address(url.split("/")[2])
    stuck = socket.create_connection((address.host, address.port), timeout=10)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(b"GET /stream/1.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        time.sleep(2.0)  # enough for its socket buffers to fill
        start, before = time.monotonic(), player.published
        parts = _mjpeg_parts(url + "stream/1.mjpg", 4)
        assert len(set(parts)) >= 2  # another client's frames move on (a repeat: a keep-alive)
        time.sleep(1.0)
        rate = (player.published - before) / (time.monotonic() - start)
        assert rate > 0.5 / player.period * 0.5  # the player is not held up
        encodes = player.board.encodes
        time.sleep(1.0)
        assert player.board.encodes - encodes <= 10 + 2  # rate 10 for the stuck one's stream
        assert len(player.board._tiles[1].jpeg) < 100_000  # one JPEG kept, not a queue
    finally:
        stuck.close()


@needs_chromium
def test_the_page_in_a_browser_shows_every_tile(served: tuple[Player, str], tmp_path: Path) -> None:
    _, url = served
    shot = screenshot(url, tmp_path / "page.png")
    found = tiles(shot)
    assert len(found) == 4, f"{len(found)} tiles in {shot}"
    blank = [i for i, tile in enumerate(found) if not shows_a_frame(tile)]
    assert not blank, f"tiles {blank} show no frame"


def test_port_in_use_and_addresses_that_cannot_be_bound() -> None:
    board = FrameBoard(["a"], list)
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(ServeError, match=rf"cannot serve on 127\.0\.0\.1:{port}: .*in use"):
                BoardServer(board, "127.0.0.1", port)
        with pytest.raises(ServeError, match=r"cannot serve on 192\.0\.2\.1:0: .*assign"):
            BoardServer(board, "192.0.2.1", 0)  # TEST-NET-1: no interface has it
        with pytest.raises(ServeError, match=r"cannot serve on no-such-host\.invalid:80"):
            BoardServer(board, "no-such-host.invalid", 80)
    finally:
        board.close()
