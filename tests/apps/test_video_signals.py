"""copyless-video on copyless.Pipeline: SIGINT / SIGTERM to a real child process mid-run (the
frames in flight come out, the -o files are finished and playable with every frame printed,
the closing block is printed, one line says why it stopped, exit 130 / 143, no traceback;
with --serve it exits at once), and each stream's frames in order with 3 streams of different
lengths batched 2 at a time across them."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import av
import pytest

from copyless.apps import video
from video_helpers import EXPECTED, make_clip

SIZE = (240, 320)  # test_video_app's: the built-in model for it is cached already
LONG = 150  # frames per scene: 300 a stream, far more than the run gets to before the signal
FRAME = re.compile(r"^(?:stream (\d+) )?frame (\d+): (\d+) ", re.M)
STREAM_LINE = re.compile(r"^stream (\d+): (\d+) frames, .* dropped (\d+)$", re.M)
BLOCK = ("decode", "preprocess", "infer", "postprocess", "total", "throughput (pipeline)")


def _script() -> str:
    found = shutil.which("copyless-video", path=str(Path(sys.executable).parent))
    assert found, "the console script is installed beside the interpreter"
    return found


@pytest.fixture(scope="module")
def long_clips(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("signals")
    first = make_clip(folder / "a.mp4", *SIZE, LONG)
    second = folder / "b.mp4"
    shutil.copyfile(first, second)
    # the built-in model compiled and the engine chosen here, so the children's stderr holds
    # nothing from a first build
    assert video.main(["-i", str(first), "-n", "1"]) == 0
    return first, second


def _frames(out: str) -> dict[int, list[tuple[int, int]]]:
    """Stream -> its ``(frame, label)`` lines in the order printed (stream 0 for one input)."""
    found: dict[int, list[tuple[int, int]]] = {}
    for m in FRAME.finditer(out):
        found.setdefault(int(m.group(1) or 0), []).append((int(m.group(2)), int(m.group(3))))
    return found


def _written(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def _lines_until(stream: Iterator[str], pattern: re.Pattern[str], count: int) -> list[str]:
    """Lines of ``stream`` until ``count`` of them match (or it ends)."""
    seen, matched = [], 0
    for line in stream:
        seen.append(line)
        matched += bool(pattern.match(line))
        if matched >= count:
            break
    return seen


def _rest(child: subprocess.Popen[str], timeout: float = 60.0) -> tuple[str, str]:
    """What is left on the child's stdout and stderr, once it exits."""
    assert child.stdout is not None and child.stderr is not None
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(child.stderr.read()))  # type: ignore[union-attr]
    reader.start()
    out = child.stdout.read()
    reader.join(timeout)
    child.wait(timeout)
    child.stdout.close()
    child.stderr.close()
    return out, "".join(err)


def _run_and_signal(argv: list[str], sig: signal.Signals) -> tuple[int, str, str]:
    """Start ``copyless-video ARGV``, send ``sig`` once 10 frames are printed, return the
    exit status, stdout and stderr."""
    child = subprocess.Popen(
        [_script(), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # lines come out as they are printed
    )  # fmt: skip
    try:
        assert child.stdout is not None
        head = _lines_until(child.stdout, FRAME, 10)
        assert len(head) >= 10, head
        child.send_signal(sig)
        # read the rest through the same file objects: communicate() reads the pipes' fds
        # and would lose the lines the text wrapper has already buffered
        out, err = _rest(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    return child.returncode, "".join(head) + out, err


@pytest.mark.parametrize(
    ("sig", "code", "inputs"),
    [(signal.SIGINT, 130, 2), (signal.SIGTERM, 143, 2), (signal.SIGTERM, 143, 1)],
)
def test_a_signal_mid_run_finishes_the_outputs_and_prints_the_block(
    long_clips: tuple[Path, Path], tmp_path: Path, sig: signal.Signals, code: int, inputs: int
) -> None:
    out_path = tmp_path / "annotated.mp4"
    argv = [arg for clip in long_clips[:inputs] for arg in ("-i", str(clip))]
    status, out, err = _run_and_signal([*argv, "-o", str(out_path)], sig)
    assert status == code, (out, err)
    assert "Traceback" not in err
    others = [line for line in err.splitlines() if line and not line.startswith("engine: ")]
    assert others == [f"copyless-video: stopped by {sig.name}"], err
    found = _frames(out)
    assert sorted(found) == list(range(inputs))
    for got in found.values():  # every frame taken came out, in order; the run was cut short
        assert [index for index, _ in got] == list(range(len(got)))
        assert 0 < len(got) < 2 * LONG
        assert all(label in EXPECTED["chelsea"] for index, label in got if index < LONG)
    closing = {int(s): (int(n), int(d)) for s, n, d in STREAM_LINE.findall(out)}
    assert closing == {s: (len(found[s]), 0) for s in range(inputs)}, out
    block = out.strip().splitlines()[-7:]
    assert [line[:24].strip() for line in block] == [*BLOCK, "frames"], block
    assert block[-1].split() == ["frames", str(sum(len(got) for got in found.values()))]
    if inputs == 1:
        assert _written(out_path) == len(found[0])
    else:  # one playable file per stream, as many frames as its lines
        for s in range(inputs):
            assert _written(tmp_path / f"annotated.{s}.mp4") == len(found[s])
        assert not out_path.exists()


def test_a_signal_mid_run_with_serve_exits_at_once(long_clips: tuple[Path, Path]) -> None:
    """The page does not serve on after an interrupted run: the signal's status, no wait for
    a second signal."""
    status, out, err = _run_and_signal(["-i", str(long_clips[0]), "--serve", "127.0.0.1:0"],
                                       signal.SIGTERM)  # fmt: skip
    assert status == 143, (out, err)
    assert "inputs done" not in err and "Traceback" not in err
    assert err.splitlines()[0].startswith("serving http://127.0.0.1:")
    assert err.splitlines()[-1] == "copyless-video: stopped by SIGTERM"
    assert re.search(r"^frames {18}\d+$", out, re.M)


def test_three_streams_of_other_lengths_batched_two_at_a_time_keep_their_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenes = {0: ("chelsea", "coffee"), 1: ("coffee", "chelsea"), 2: ("chelsea",)}
    per_scene = {0: 3, 1: 5, 2: 2}  # 6, 10 and 2 frames: batches mix streams, some end early
    clips = [make_clip(tmp_path / f"s{s}.mp4", *SIZE, per_scene[s], scenes[s]) for s in scenes]
    out = tmp_path / "annotated.mp4"
    argv = [arg for clip in clips for arg in ("-i", str(clip))]
    assert video.main([*argv, "--batch", "2", "--batch-wait", "20", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    found = _frames(text)
    total = 0
    for s, names in scenes.items():
        frames = per_scene[s] * len(names)
        total += frames
        assert [index for index, _ in found[s]] == list(range(frames)), (s, found[s])
        for index, label in found[s]:  # each frame's own label: no row of another stream's
            assert label in EXPECTED[names[index // per_scene[s]]], (s, index, label)
        assert _written(tmp_path / f"annotated.{s}.mp4") == frames
    batched = re.search(r"^batched {17}(\d+) frames in (\d+) runs", text, re.M)
    assert batched is not None and int(batched.group(1)) == total
    assert -(-total // 2) <= int(batched.group(2)) < total  # most runs hold 2 frames
    closing = {int(s): (int(n), int(d)) for s, n, d in STREAM_LINE.findall(text)}
    assert closing == {s: (len(found[s]), 0) for s in scenes}
