"""The frame board: publishing costs the inference side nothing, JPEGs are made only while
watched and at most at the set rate, a watcher gets the latest JPEG and skips the rest."""

from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pytest
import skimage.data
from PIL import Image

from board_helpers import StreamMeter
from copyless.apps.video._board import FrameBoard
from copyless.vision import Box

CHELSEA = skimage.data.chelsea()
COFFEE = skimage.data.coffee()


@dataclass
class Result:
    """A published result over a real photo; counts its conversions to RGB."""

    stream: int
    banner: str
    image: np.ndarray = field(default_factory=lambda: CHELSEA)
    boxes: tuple[Box, ...] = ()
    conversions: list[float] = field(default_factory=list)

    def rgb(self) -> np.ndarray:
        self.conversions.append(time.monotonic())
        return self.image


def _board(streams: int = 1, rate: float = 50.0, **kwargs: float) -> FrameBoard:
    """A board; no CPU budget unless ``cpu_share`` is given (this process is mostly idle)."""
    meters = [StreamMeter(i, f"clip{i}") for i in range(streams)]
    kwargs.setdefault("cpu_share", 1.0)
    return FrameBoard([m.source for m in meters], lambda: [m.figures() for m in meters],
                      rate=rate, **kwargs)  # fmt: skip


def _decode(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))


def test_publish_without_watchers_never_converts_or_encodes() -> None:
    with _board(2) as board:
        results = [Result(i % 2, f"{i}: tabby") for i in range(200)]
        start = time.perf_counter()
        for result in results:
            board.publish(result)
        per_publish = (time.perf_counter() - start) / len(results)
        time.sleep(0.2)
        assert board.encodes == 0
        assert not any(r.conversions for r in results)
    assert per_publish < 1e-3  # a dict store under a lock, not an encode (about 5 ms)


def test_a_watcher_gets_the_latest_frame_drawn() -> None:
    with _board() as board:
        board.publish(Result(0, "1: tabby", CHELSEA))
        board.publish(Result(0, "2: espresso", COFFEE, (Box(100, 100, 300, 250, 0.9),)))
        with board.watch(0) as next_jpeg:
            jpeg = next_jpeg(5.0)
    assert jpeg is not None
    image = _decode(jpeg)
    assert image.shape == COFFEE.shape  # 400x600: not shrunk (max_width 640)
    assert board.encodes == 1  # only the latest result was encoded
    banner = image[: COFFEE.shape[0] // 12]
    assert banner.mean() < 60 and banner.max() > 200  # white text on a black band
    assert np.abs(image[150, 150:250].astype(int) - COFFEE[150, 150:250]).mean() < 12
    assert image[100:250, 99:102, 1].mean() > 180  # the box's green outline


def test_wide_frames_are_shrunk_for_the_page() -> None:
    wide = np.asarray(Image.fromarray(CHELSEA).resize((1280, 600)))
    with _board(max_width=640) as board:
        board.publish(Result(0, "0: tabby", wide))
        jpeg = board.snapshot(0, timeout=5.0)
    assert jpeg is not None and _decode(jpeg).shape == (300, 640, 3)


def test_encoding_rate_is_capped_and_watchers_skip_to_the_latest() -> None:
    rate, seconds = 10.0, 1.5
    with _board(rate=rate) as board:
        stop = threading.Event()

        def produce() -> None:  # 200 results a second, as a fast model would
            n = 0
            while not stop.is_set():
                board.publish(Result(0, f"{n}: tabby"))
                n += 1
                time.sleep(0.005)

        producer = threading.Thread(target=produce)
        producer.start()
        got = []
        try:
            with board.watch(0) as next_jpeg:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    if (jpeg := next_jpeg(1.0)) is not None:
                        got.append(jpeg)
        finally:
            stop.set()
            producer.join()
    assert 0.5 * rate * seconds <= board.encodes <= rate * seconds + 2
    assert len(got) == len(set(got))  # never the same JPEG twice: only newer ones


@pytest.mark.parametrize("share", [0.02, 0.10])
def test_the_encoder_keeps_to_its_cpu_budget_while_results_come(share: float) -> None:
    """A busy "inference" thread publishing large frames: the JPEGs take at most ``share``
    of the process's CPU time (plus the one encode that crossed it); after the results
    stop, the final frame is still encoded."""
    big = np.asarray(Image.fromarray(CHELSEA).resize((1920, 1080)))
    with _board(rate=100.0, cpu_share=share) as board:
        start = time.process_time()
        with board.watch(0) as next_jpeg:
            end = time.monotonic() + 2.0
            n = 0
            while time.monotonic() < end:
                board.publish(Result(0, f"{n}: tabby", big))
                n += 1
                busy = time.thread_time() + 0.005  # 5 ms of inference per frame
                while time.thread_time() < busy:
                    pass
            cpu = time.process_time() - start
            made, spent = board.encodes, board.encode_seconds
            assert 1 <= made < n
            assert spent <= share * cpu + spent / made * 2, (spent, cpu, made)
            board.publish(final := Result(0, "final: tabby", CHELSEA))
            deadline = time.monotonic() + 10
            while not final.conversions and time.monotonic() < deadline:
                next_jpeg(1.0)
            assert final.conversions  # encoded once the results stopped, budget or not


def test_encoding_stops_when_the_last_watcher_goes() -> None:
    with _board(rate=100.0) as board:
        board.publish(Result(0, "0: tabby"))
        with board.watch(0) as next_jpeg:
            assert next_jpeg(5.0) is not None
        made = board.encodes
        for n in range(20):
            board.publish(Result(0, f"{n}: tabby"))
            time.sleep(0.01)
        assert board.encodes == made


def test_close_wakes_watchers_and_stops_the_thread() -> None:
    board = _board()
    woke = []

    def watch() -> None:
        with board.watch(0) as next_jpeg:
            woke.append(next_jpeg(30.0))

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(0.2)
    board.close()
    watcher.join(5.0)
    assert not watcher.is_alive() and woke == [None]
    assert not any(t.name == "copyless-board-jpeg" for t in threading.enumerate())


def test_unknown_stream_and_bad_options() -> None:
    with _board(2) as board:
        with pytest.raises(IndexError), board.watch(2):
            pass
        assert board.snapshot(1, timeout=0.1) is None  # no result yet
    with pytest.raises(ValueError, match="rate"):
        FrameBoard(["a"], list, rate=0)
    with pytest.raises(ValueError, match="at least one"):
        FrameBoard([], list)
