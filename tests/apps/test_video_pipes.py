"""copyless-video on pipes and failed streams (issue 40 item 5), as child processes:
``-i -``, ``-i /dev/stdin`` and a FIFO are read to their end as files (before: ``-i -`` was
refused and /dev/stdin was taken for a camera, dropping 46 of 60 frames with exit 0), and a
stream that fails shows as failed on the --serve page's /stats.json and /metrics (before:
still 25 FPS)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from video_helpers import make_clip

SIZE = (240, 320)  # the other video tests': the compiled model is cached already
PER_SCENE = 30
FRAMES = 2 * PER_SCENE
LINE = re.compile(r"^frame (\d+): (\d+) ", re.M)
STREAM = re.compile(r"^stream (\d+): (\d+) frames, .* dropped (\d+)", re.M)
VIDEO = [sys.executable, "-m", "copyless.apps.video"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MPEG-TS clip (a format that streams: no index at the end to seek to)."""
    return make_clip(tmp_path_factory.mktemp("pipes") / "clip.ts", *SIZE, PER_SCENE)


def _every_frame(out: str) -> None:
    assert sorted(int(m.group(1)) for m in LINE.finditer(out)) == list(range(FRAMES))
    ((_, frames, dropped),) = STREAM.findall(out)
    assert (int(frames), int(dropped)) == (FRAMES, 0)


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_standard_input_is_read_to_its_end(clip: Path, name: str) -> None:
    with open(clip, "rb") as stdin:
        done = subprocess.run([*VIDEO, "-i", name, "--queue", "1", "--slots", "1"], stdin=stdin,
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    _every_frame(done.stdout)


def test_a_fifo_written_faster_than_the_model_loses_nothing(clip: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    data = clip.read_bytes()

    def feed() -> None:  # everything at once, faster than any model reads
        with open(fifo, "wb") as pipe:
            pipe.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        done = subprocess.run([*VIDEO, "-i", str(fifo), "--queue", "1", "--slots", "1"],
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    finally:
        writer.join(timeout=30)
    assert done.returncode == 0, done.stderr
    _every_frame(done.stdout)


def test_empty_standard_input_is_one_line() -> None:
    done = subprocess.run([*VIDEO, "-i", "-"], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = [row for row in done.stderr.splitlines() if "error:" in row]
    assert "standard input" in line or line.startswith("error: -")


def test_a_failed_stream_shows_as_failed_on_the_page(clip: Path, tmp_path: Path) -> None:
    """Two streams: the clip, and the same clip cut two thirds in (it fails after its
    frames). Once both ended, /stats.json says failed with the error and 0 FPS for the cut
    one, ended for the other; /metrics says copyless_video_failed 1 and up 0."""
    whole = make_clip(tmp_path / "whole.mkv", *SIZE, PER_SCENE).read_bytes()
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    command = [*VIDEO, "-i", str(clip), "-i", str(cut), "--serve", "127.0.0.1:0"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        url = re.match(r"^serving (http://\S+)$", proc.stderr.readline())
        assert url is not None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line, "the app ended before its inputs did"
            if line.startswith("inputs done; serving"):
                break
        with urllib.request.urlopen(url.group(1) + "stats.json", timeout=30) as reply:
            streams = json.loads(reply.read())["streams"]
        with urllib.request.urlopen(url.group(1) + "metrics", timeout=30) as reply:
            metrics = reply.read().decode()
        with urllib.request.urlopen(url.group(1), timeout=30) as reply:
            page = reply.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    good, failed = streams
    assert (good["state"], good["error"], good["frames"]) == ("ended", None, FRAMES)
    assert good["fps"] == good["mean_fps"] > 0
    assert failed["state"] == "failed" and failed["fps"] == 0.0 and failed["frames"] < FRAMES
    assert "ends early" in failed["error"] or "did not decode" in failed["error"]
    stream1 = f'source="{cut}",stream="1"'
    assert re.search(rf"^copyless_video_failed\{{{stream1}\}} 1\.0$", metrics, re.M), metrics
    assert re.search(rf"^copyless_video_up\{{{stream1}\}} 0\.0$", metrics, re.M)
    assert re.search(rf"^copyless_video_fps\{{{stream1}\}} 0\.0$", metrics, re.M)
    assert "FAILED after" in page  # the page's script says it on the tile
