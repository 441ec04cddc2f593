"""The live page's cost to inference: ``copyless-video`` frames/s without ``--serve``, with
``--serve`` and a browser-like client watching the MJPEG stream, and with a client that
connects and never reads; the server's memory (peak RSS) in each case.

The clip is encoded once from real photos (H.264, ``--size``, ``--frames`` frames: chelsea,
coffee, astronaut). Each round runs one process per arrangement, in a rotating order:

* ``plain``: ``copyless-video -i CLIP``;
* ``watched``: ``... --serve 127.0.0.1:0``, a client reading ``/stream/0.mjpg`` as fast as
  it comes (the page's ``<img>``) and ``/stats.json`` twice a second (the page's script);
* ``stuck``: ``... --serve 127.0.0.1:0``, a client that asks for ``/stream/0.mjpg`` with a
  4 KiB receive buffer and never reads.

Frames/s is the app's own ``throughput (pipeline)`` line (decode to last result, start-up
and model loading excluded: the page's cost is paid while frames flow). The ratios are the
medians over rounds of each round's ``watched / plain`` and ``stuck / plain``; peak RSS is
sampled every 50 ms (psutil). On a loaded machine frames/s swings by tens of percent from
run to run, so the CPU time the process used (user + system, ``getrusage`` of the waited
child: start-up included, and for ``--serve`` the serving after the input until SIGTERM) is
reported per frame too, and the CPU time the board's encoder thread spent on the page's
JPEGs (its own ``thread_time``, read from ``/stats.json``) as a share of the process's: the
direct cost of watching, whatever the load. Every arrangement must print the same labels
for every frame.

Run: ``python benchmarks/serve.py [--frames 450] [--size 480x640] [--rounds 5] [--serve-fps 5]
[--quick]``. The last line is ``serve: watched R.RRRx, stuck R.RRRx of plain frames/s; CPU
per frame watched R.RRRx, stuck R.RRRx of plain``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

SCENES = ("chelsea", "coffee", "astronaut")
ARRANGEMENTS = ("plain", "watched", "stuck")
_FPS = re.compile(r"^throughput \(pipeline\)\s+([\d.]+) FPS$", re.M)


@dataclass
class Run:
    fps: float
    peak_rss: int
    cpu: float  # seconds, user + system
    labels: list[str]
    jpegs: int = 0  # JPEGs the watching client received
    jpeg_cpu: float = 0.0  # CPU seconds the app's board spent making JPEGs
    made: int = 0  # JPEGs the app's board made


class _Watcher:
    """Reads the MJPEG stream and the figures as the page does, until stopped."""

    def __init__(self, url: str) -> None:
        self.url, self.jpegs = url, 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._mjpeg), threading.Thread(target=self._stats)]
        for thread in self.threads:
            thread.start()

    def _mjpeg(self) -> None:
        with contextlib.suppress(OSError):  # the app went first
            self._read_mjpeg()

    def _read_mjpeg(self) -> None:
        with urllib.request.urlopen(self.url + "stream/0.mjpg", timeout=30) as reply:
            while not self.stop.is_set():
                line = reply.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    reply.readline()
                    reply.read(int(line.split(b":")[1]))
                    self.jpegs += 1

    def _stats(self) -> None:
        while not self.stop.wait(0.5):
            try:
                with urllib.request.urlopen(self.url + "stats.json", timeout=30) as reply:
                    reply.read()
            except OSError:  # the app went first
                return

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=35)


def _run(command: list[str], arrangement: str) -> Run:
    serve = arrangement != "plain"
    full = [*command, "--serve", "127.0.0.1:0"] if serve else command
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        process = psutil.Process(proc.pid)
        while not done.wait(0.05):
            try:
                peak[0] = max(peak[0], process.memory_info().rss)
            except psutil.Error:
                return

    sampler = threading.Thread(target=sample)
    sampler.start()
    client: _Watcher | socket.socket | None = None
    jpegs, jpeg_cpu, made = 0, 0.0, 0
    try:
        if serve:
            assert proc.stderr is not None
            url = proc.stderr.readline().split()[-1]
            if arrangement == "watched":
                client = _Watcher(url)
            else:
                port = int(url.rstrip("/").split(":")[-1])
                client = socket.create_connection(("127.0.0.1", port))
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                client.sendall(b"GET /stream/0.mjpg HTTP/1.1\r\nHost: bench\r\n\r\n")
            while not proc.stderr.readline().startswith("inputs done"):
                if proc.poll() is not None:
                    break
            with urllib.request.urlopen(url + "stats.json", timeout=30) as reply:
                board = json.loads(reply.read())
            jpeg_cpu, made = float(board["jpeg_cpu_seconds"]), int(board["jpegs"])
            if isinstance(client, _Watcher):  # before the app goes: it is not an error
                client.close()
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=600)
    finally:
        done.set()
        sampler.join()
        if isinstance(client, _Watcher):
            client.close()
            jpegs = client.jpegs
        elif client is not None:
            client.close()
    if proc.returncode != 0:
        raise SystemExit(f"{arrangement}: copyless-video failed ({proc.returncode}):\n"
                         f"{err[-2000:]}")  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # one child at a time: this one's
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    match = _FPS.search(out)
    if match is None:
        raise SystemExit(f"{arrangement}: no throughput line in:\n{out[-2000:]}")
    labels = [line.split(" ", 2)[2] for line in out.splitlines() if line.startswith("frame ")]
    return Run(float(match.group(1)), peak[0], cpu, labels, jpegs, jpeg_cpu, made)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=450)
    parser.add_argument("--size", default="480x640", help="HxW of the clip")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve-fps", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="90 frames, 2 rounds")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from video_helpers import make_clip

    if args.quick:
        args.frames, args.rounds = 90, 2
    height, width = (int(v) for v in args.size.lower().split("x"))
    per_scene = args.frames // len(SCENES)
    frames = per_scene * len(SCENES)
    runs: dict[str, list[Run]] = {name: [] for name in ARRANGEMENTS}
    with tempfile.TemporaryDirectory() as tmp:
        clip = str(make_clip(Path(tmp) / "clip.mp4", height, width, per_scene, SCENES))
        command = [sys.executable, "-m", "copyless.apps.video", "-i", clip,
                   "--serve-fps", str(args.serve_fps)]  # fmt: skip
        _run([*command, "-n", "2"], "plain")  # builds and caches the compiled model
        print(f"clip {width}x{height}, {frames} frames, --serve-fps {args.serve_fps:g}; "
              f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
        for r in range(args.rounds):
            order = ARRANGEMENTS[r % 3 :] + ARRANGEMENTS[: r % 3]
            for name in order:
                runs[name].append(_run(command, name))
            got = {name: runs[name][-1] for name in ARRANGEMENTS}
            if any(len(run.labels) != frames for run in got.values()) or any(
                run.labels != got["plain"].labels for run in got.values()
            ):
                raise SystemExit(f"round {r}: the arrangements' labels differ")
            print(f"round {r}: " + ", ".join(
                f"{name} {run.fps:.1f} frames/s {run.cpu / frames * 1000:.1f} CPU-ms/frame "
                f"{run.peak_rss / 2**20:.0f} MiB"
                + (f" ({run.jpegs} JPEGs, {run.jpeg_cpu * 1000:.0f} CPU-ms making them)"
                   if name == "watched" else "")
                for name, run in got.items()))  # fmt: skip
    plain = [run.fps for run in runs["plain"]]
    print(f"load after: {os.getloadavg()[0]:.2f}")
    ratios, cpu_ratios = {}, {}
    plain_cpu = [run.cpu for run in runs["plain"]]
    for name in ARRANGEMENTS:
        fps = statistics.median(run.fps for run in runs[name])
        cpu = statistics.median(run.cpu for run in runs[name]) / frames * 1000
        rss = statistics.median(run.peak_rss for run in runs[name]) / 2**20
        ratios[name] = statistics.median(r.fps / p for r, p in zip(runs[name], plain, strict=True))
        cpu_ratios[name] = statistics.median(
            r.cpu / p for r, p in zip(runs[name], plain_cpu, strict=True)
        )
        print(f"{name:<8} median {fps:.1f} frames/s ({ratios[name]:.3f}x plain), "
              f"{cpu:.2f} CPU-ms/frame ({cpu_ratios[name]:.3f}x plain), peak RSS {rss:.0f} MiB "
              "(medians; ratios: medians of the rounds' ratios)")  # fmt: skip
    share = statistics.median(r.jpeg_cpu / r.cpu for r in runs["watched"])
    per_jpeg = statistics.median(r.jpeg_cpu / max(1, r.made) for r in runs["watched"]) * 1000
    print(f"watched: the page's JPEGs took {share:.2%} of the process's CPU time "
          f"({per_jpeg:.2f} CPU-ms per JPEG; medians)")  # fmt: skip
    print(f"serve: watched {ratios['watched']:.3f}x, stuck {ratios['stuck']:.3f}x of plain "
          f"frames/s; CPU per frame watched {cpu_ratios['watched']:.3f}x, "
          f"stuck {cpu_ratios['stuck']:.3f}x of plain")  # fmt: skip


if __name__ == "__main__":
    main()
