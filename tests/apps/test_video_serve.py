"""copyless-video --serve end to end, as a process: the live page while a clip plays (in
headless Chromium), /metrics parsed by prometheus-client, a 404 and a client that never
reads while inference goes on, serving after the input ends until SIGTERM/SIGINT (exit 0),
and addresses that cannot be served on (one line, exit 2)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from browser_helpers import needs_chromium, screenshot, shows_a_frame, tiles
from copyless.apps import video
from video_helpers import EXPECTED, make_clip

SIZE = (240, 320)  # test_video_app's: the compiled model is cached already
PER_SCENE = 100
FRAMES = 2 * PER_SCENE
LINE = re.compile(r"^frame (\d+): (\d+) ", re.M)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("serve") / "clip.mp4", *SIZE, PER_SCENE)


class App:
    """``copyless-video -i CLIP [-i CLIP ...] --serve 127.0.0.1:0`` as a child process."""

    def __init__(self, *clips: Path) -> None:
        inputs = [arg for clip in clips for arg in ("-i", str(clip))]
        command = [sys.executable, "-m", "copyless.apps.video", *inputs,
                   "--serve", "127.0.0.1:0"]  # fmt: skip
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)  # fmt: skip
        assert self.proc.stderr is not None
        first = self.proc.stderr.readline()
        match = re.match(r"^serving (http://\S+)$", first)
        assert match, first + self.proc.stderr.read()
        self.url = match.group(1)
        self.port = int(self.url.rstrip("/").rpartition(":")[2])

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def frames_done(self, stream: int = 0) -> int:
        """Results of ``stream`` so far (0 before its input is open)."""
        streams = json.loads(self.get("stats.json")[1])["streams"]
        return int(streams[stream]["frames"]) if streams else 0

    def wait_until_done(self, timeout: float = 300.0) -> None:
        """Until the stderr line saying the input is done (the app serves on)."""
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if line.startswith("inputs done; serving"):
                return
            assert line, "the app ended before its input did"
        raise AssertionError("the app did not finish its input")

    def stop(self, sig: int) -> tuple[int, str, str]:
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def app(clip: Path) -> Iterator[App]:
    running = App(clip)
    try:
        yield running
    finally:
        running.kill()


def _labels_right(out: str) -> None:
    labels = {int(m.group(1)): int(m.group(2)) for m in LINE.finditer(out)}
    assert sorted(labels) == list(range(FRAMES))
    for index, label in labels.items():
        assert label in EXPECTED["chelsea" if index < PER_SCENE else "coffee"], (index, label)


def test_metrics_404_and_a_stuck_client_while_playing_then_sigterm(app: App) -> None:
    stuck = socket.create_connection(("127.0.0.1", app.port))
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(b"GET /stream/0.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")  # and never read
    try:
        while app.frames_done() < 10:
            time.sleep(0.1)
        status, _ = app.get("stream/1.mjpg")
        assert status == 404
        rss = [psutil.Process(app.proc.pid).memory_info().rss]
        while app.frames_done() < FRAMES:
            rss.append(psutil.Process(app.proc.pid).memory_info().rss)
            time.sleep(0.2)
        assert max(rss) - rss[0] < 64 << 20, [r >> 20 for r in rss]
        app.wait_until_done()
        for _ in range(2):  # after the input: the final figures, again and again
            status, body = app.get("metrics")
            assert status == 200
            families = {f.name: f for f in text_string_to_metric_families(body.decode())}
            (frames,) = [s for s in families["copyless_video_frames"].samples
                         if s.name.endswith("_total")]  # fmt: skip
            assert frames.value == FRAMES and frames.labels["stream"] == "0"
            quantiles = {s.labels["quantile"]: s.value
                         for s in families["copyless_video_latency_seconds"].samples}  # fmt: skip
            assert 0 < quantiles["0.5"] <= quantiles["0.99"] < 10
            (fps,) = families["copyless_video_fps"].samples
            assert fps.value > 1
            time.sleep(0.5)
        status, body = app.get("stream/0.jpg")
        assert status == 200 and body[:2] == b"\xff\xd8"
        start = time.monotonic()
        code, out, err = app.stop(signal.SIGTERM)  # the stuck client still connected
        assert time.monotonic() - start < 15
    finally:
        stuck.close()
    assert code == 0, err
    assert err == ""  # nothing more than the two serving lines read above
    _labels_right(out)
    assert out.strip().splitlines()[-1].split() == ["frames", str(FRAMES)]


@needs_chromium
def test_the_page_in_a_browser_while_the_clip_plays_then_sigint(app: App, tmp_path: Path) -> None:
    while app.frames_done() < 1:
        time.sleep(0.1)
    shot = screenshot(app.url, tmp_path / "page.png")
    playing = app.frames_done() < FRAMES
    found = tiles(shot)
    assert len(found) == 1 and shows_a_frame(found[0]), shot
    app.wait_until_done()
    code, out, err = app.stop(signal.SIGINT)
    assert code == 0, err
    _labels_right(out)
    if not playing:  # a very slow machine: the page still showed the final frame
        pytest.fail("the clip ended before the screenshot: the page was not seen while playing")


FOUR = ("chelsea", "coffee", "astronaut", "coffee")
PER_STREAM = 60
STREAM_LINE = re.compile(r"^stream (\d) frame (\d+): (\d+) ", re.M)


@pytest.fixture(scope="module")
def four_clips(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("four")
    return [make_clip(folder / f"cam{i}.mp4", *SIZE, PER_STREAM, (name,))
            for i, name in enumerate(FOUR)]  # fmt: skip


@needs_chromium
def test_four_streams_four_tiles_in_a_browser(four_clips: list[Path], tmp_path: Path) -> None:
    app = App(*four_clips)
    try:
        while min(app.frames_done(s) for s in range(4)) < 1:
            time.sleep(0.1)
        shot = screenshot(app.url, tmp_path / "page.png", size=(1400, 1000))
        playing = min(app.frames_done(s) for s in range(4)) < PER_STREAM
        found = tiles(shot)
        assert len(found) == 4, f"{len(found)} tiles in {shot}"
        blank = [i for i, tile in enumerate(found) if not shows_a_frame(tile)]
        assert not blank, f"tiles {blank} show no frame in {shot}"
        assert app.get("stream/4.mjpg")[0] == 404
        app.wait_until_done()
        families = {f.name: f for f in text_string_to_metric_families(app.get("metrics")[1]
                                                                       .decode())}  # fmt: skip
        frames = {s.labels["stream"]: s.value for s in families["copyless_video_frames"].samples
                  if s.name.endswith("_total")}  # fmt: skip
        assert frames == {str(s): PER_STREAM for s in range(4)}
        code, out, err = app.stop(signal.SIGTERM)
    finally:
        app.kill()
    assert code == 0, err
    got = {(int(m.group(1)), int(m.group(2))): int(m.group(3)) for m in STREAM_LINE.finditer(out)}
    assert sorted(got) == [(s, n) for s in range(4) for n in range(PER_STREAM)]
    for (stream, _), label in got.items():
        if FOUR[stream] in EXPECTED:
            assert label in EXPECTED[FOUR[stream]], (stream, label)
    if not playing:
        pytest.fail("the clips ended before the screenshot: the page was not seen while playing")


def test_addresses_that_cannot_be_served_on(clip: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert video.main(["-i", str(clip), "--serve", f"127.0.0.1:{port}"]) == 2
        err = capsys.readouterr().err
        assert re.fullmatch(rf"error: cannot serve on 127\.0\.0\.1:{port}: .*in use\n", err), err
    assert video.main(["-i", str(clip), "--serve", "192.0.2.1:8080"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"error: cannot serve on 192\.0\.2\.1:8080: .*\n", err), err
    for bad in ("localhost:http", "99999"):
        with pytest.raises(SystemExit) as exc:
            video.main(["-i", str(clip), "--serve", bad])
        assert exc.value.code == 2
        assert "HOST:PORT" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        video.main(["-i", str(clip), "--serve", "0", "--serve-fps", "0"])
    assert "--serve-fps must be > 0" in capsys.readouterr().err


def test_a_bad_input_with_serve_still_exits_2_at_once(tmp_path: Path) -> None:
    missing = tmp_path / "missing.mp4"
    command = [sys.executable, "-m", "copyless.apps.video", "-i", str(missing), "--serve", "0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONWARNINGS": "error"})  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0].startswith("serving http://127.0.0.1:") and len(lines) == 2
    assert lines[1].startswith("error: ") and "missing.mp4" in lines[1]
