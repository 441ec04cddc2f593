"""copyless-batch under SIGINT and SIGTERM, as a child process mid-run: the sources stop,
the batches running are written, every part file (or the single file) is complete Parquet,
the summary is printed, and the exit status is 130 / 143 with one stderr line and no
traceback."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import termios
import threading
import time
import tty
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ray_helpers import RAY_ENV, batch_command

pytest.importorskip("ray")

CLOSING = re.compile(r"^(\d+) images(?: \(\d+ unreadable\))? in \d+\.\d\d s, ")
#: Images in the run: enough that a signal after the first part lands mid-run.
IMAGES = 400


def _many_photos(folder: Path, expected: dict[str, frozenset[int]]) -> dict[str, frozenset[int]]:
    """``IMAGES`` links to the JPEG photos, each with the classes of its target."""
    folder.mkdir()
    jpegs = sorted(p for p in expected if p.endswith(".jpg"))
    links = {}
    for i in range(IMAGES):
        target = jpegs[i % len(jpegs)]
        link = folder / f"{i:04d}.jpg"
        link.symlink_to(target)
        links[str(link)] = expected[target]
    return links


def _stderr_lines(stderr: str) -> list[str]:
    """stderr's lines as a terminal shows them (the progress bar redraws with \\r)."""
    shown = [line.rsplit("\r", 1)[-1] for line in stderr.split("\n")]
    return [line for line in shown if line.strip()]


class _Stderr:
    """The child's stderr, a terminal (a pty in raw mode: the progress bar is drawn only on
    a terminal, and it says when rows are done), read as it comes."""

    def __init__(self) -> None:
        self.data = b""
        self._leader, self.follower = os.openpty()
        tty.setraw(self.follower)  # no \r added to each \n
        # 24 x 120: a pty starts 0 x 0, where tqdm's dynamic width draws nothing
        fcntl.ioctl(self.follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
        self._thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> None:
        """The child has the follower end: the reader sees EOF when the child ends."""
        os.close(self.follower)
        self._thread.start()

    def _read(self) -> None:
        try:
            while chunk := os.read(self._leader, 4096):
                self.data += chunk
        except OSError:  # EIO: every follower end is closed
            pass
        finally:
            os.close(self._leader)

    def images_done(self) -> int:
        counts = re.findall(rb"(\d+)/%d" % IMAGES, self.data)
        return int(counts[-1]) if counts else 0

    def text(self) -> str:
        self._thread.join(timeout=60)
        return self.data.decode(errors="replace")


def _signal_mid_run(command: list[str], ready: Callable[[_Stderr], bool], sig: int,
                    within_s: float) -> tuple[int, str, str]:
    """Run ``command`` (its stderr a terminal), send ``sig`` once ``ready`` says the run is
    mid-way (at most ``within_s`` seconds on), wait for it to end: (exit status, stdout,
    stderr). The child is killed if it outlives the wait."""
    stderr = _Stderr()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr.follower,
                          env={**os.environ, **RAY_ENV}) as process:  # fmt: skip
        stderr.start()
        try:
            deadline = time.monotonic() + within_s
            while process.poll() is None and time.monotonic() < deadline:
                if ready(stderr):
                    break
                time.sleep(0.02)
            assert process.poll() is None, "the run ended before the signal"
            process.send_signal(sig)
            process.wait(timeout=180)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            assert process.stdout is not None
            stdout = process.stdout.read().decode()
            err = stderr.text()
    return process.returncode, stdout, err


@pytest.mark.parametrize(
    ("sig", "output"),
    [(signal.SIGINT, "parts/"), (signal.SIGTERM, "parts/"), (signal.SIGINT, "out.parquet")],
    ids=["sigint-parts", "sigterm-parts", "sigint-file"],
)
def test_a_signal_mid_run_writes_what_finished_and_exits_with_its_code(
    ray_head, photo_folder, tmp_path, sig, output
) -> None:
    _, expected = photo_folder
    links = _many_photos(tmp_path / "many", expected)
    out = tmp_path / output.rstrip("/")
    command = [*batch_command(), str(tmp_path / "many"), "-o", f"{tmp_path}/{output}",
               "--address", ray_head.address, "--batch-size", "4"]  # fmt: skip
    returncode, stdout, err = _signal_mid_run(
        command, lambda stderr: stderr.images_done() > 0, sig, 240  # the first batch written
    )
    name = signal.Signals(sig).name
    assert returncode == 128 + sig, err
    assert _stderr_lines(err) == [f"copyless-batch: stopped by {name}"], err
    assert "Traceback" not in err
    match = CLOSING.match(stdout.strip())
    assert match, stdout
    if output.endswith("/"):
        parts = sorted(out.glob("part-*.parquet"))
        assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no half-written one
        rows = [row for part in parts for row in pq.read_table(part).to_pylist()]  # each whole
    else:
        rows = pq.read_table(out).to_pylist()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["many", "out.parquet"]
    assert 0 < len(rows) < IMAGES, len(rows)  # stopped mid-run, the finished rows kept
    assert int(match.group(1)) == len(rows)
    for row in rows:
        assert row["error"] is None and row["class_id"] in links[row["path"]], row


#: Pages in the OCR run (links to three drawn pages): a signal after the first line lands
#: mid-run.
PAGES = 40


def _drawn_pages(folder: Path) -> dict[str, tuple[str, ...]]:
    """``PAGES`` links to three drawn pages; each link with the lines drawn on its page."""
    from PIL import Image

    from copyless.ocr import draw_page

    folder.mkdir()
    drawn = []
    for seed in range(3):  # beside the INPUT folder
        page = draw_page(seed, size=(620, 500), lines=4)
        Image.fromarray(page.image).save(folder.parent / f"page{seed}.png")
        drawn.append((folder.parent / f"page{seed}.png", tuple(page.lines)))
    links = {}
    for i in range(PAGES):
        target, lines = drawn[i % 3]
        link = folder / f"{i:04d}.png"
        link.symlink_to(target)
        links[str(link)] = lines
    return links


def test_sigint_mid_ocr_run_writes_the_pages_finished(ray_head, tmp_path) -> None:
    """--task ocr under SIGINT, as the classification run above: the lines of every page
    finished are in a complete Parquet file, exit 130 with one stderr line."""
    links = _drawn_pages(tmp_path / "pages")
    out = tmp_path / "lines.parquet"
    command = [*batch_command(), str(tmp_path / "pages"), "-o", str(out), "--task", "ocr",
               "--address", ray_head.address, "--batch-size", "1"]  # fmt: skip
    returncode, stdout, err = _signal_mid_run(  # mid-run: lines written
        command, lambda stderr: re.search(rb"[1-9]\d* lines \[", stderr.data) is not None,
        signal.SIGINT, 300,
    )
    assert returncode == 130, err
    assert _stderr_lines(err) == ["copyless-batch: stopped by SIGINT"], err
    assert "Traceback" not in err
    match = re.match(r"^(\d+) images, (\d+) lines in \d+\.\d\d s ", stdout.strip())
    assert match, stdout
    rows = pq.read_table(out).to_pylist()
    written = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("page"))
    assert written == ["lines.parquet"]  # no temporary file left
    read = {row["path"] for row in rows}
    assert 0 < len(read) < PAGES, len(read)  # stopped mid-run, the finished pages kept
    assert (int(match.group(1)), int(match.group(2))) == (len(read), len(rows))
    for path in read:  # each page finished whole: all its lines, in order
        lines = [r for r in rows if r["path"] == path]
        assert [r["line"] for r in lines] == list(range(len(lines)))
        assert all(r["error"] is None for r in lines)
        assert sum(r["text"] in links[path] for r in lines) >= len(links[path]) - 1
