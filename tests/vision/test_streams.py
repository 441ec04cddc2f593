"""StreamSet: decoder threads per stream, batches across streams, per-stream stats, failures
that stay in their stream, live sources that drop per stream with bounded memory."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from copyless.vision import Annotated, StreamSet, StreamStats, VideoError
from video_helpers import make_clip, scene

SIZE = (120, 160)
PER_SCENE = 3


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("streams")
    return [
        make_clip(folder / "a.mp4", *SIZE, PER_SCENE, ("chelsea", "coffee")),
        make_clip(folder / "b.mp4", *SIZE, PER_SCENE, ("coffee", "chelsea", "astronaut")),
    ]


def _luma_means(clip: Path) -> list[float]:
    with StreamSet([clip]) as streams:
        streams.start()
        return [float(item.frame.planes[0].mean()) for b in streams.batches() for item in b]


@pytest.mark.parametrize("max_batch", [1, 3, 4])
def test_batches_take_every_frame_of_every_stream_in_order(
    clips: list[Path], max_batch: int
) -> None:
    with StreamSet(clips, queue=4) as streams:
        assert len(streams) == 2
        streams.start()
        seen: dict[int, list[int]] = {0: [], 1: []}
        sizes = []
        means: dict[int, list[float]] = {0: [], 1: []}
        for batch in streams.batches(max_batch, 0.05):
            sizes.append(len(batch))
            for item in batch:
                seen[item.stream].append(item.frame.index)
                means[item.stream].append(float(item.frame.planes[0].mean()))
        stats = streams.stats()
    assert seen == {0: list(range(2 * PER_SCENE)), 1: list(range(3 * PER_SCENE))}
    assert max(sizes) <= max_batch and sum(sizes) == 5 * PER_SCENE
    if max_batch > 1:  # files wait for room, so most batches are full
        assert sizes.count(max_batch) >= len(sizes) - 2, sizes
    for s, clip in enumerate(clips):  # each stream's frames are its own clip's, in order
        assert means[s] == pytest.approx(_luma_means(clip))
    assert [s.decoded for s in stats] == [2 * PER_SCENE, 3 * PER_SCENE]
    assert all(s.error is None and s.dropped == 0 for s in stats)
    assert not any(s.finished for s in stats)  # decoded to the end, but no result published


def test_a_batch_mixes_streams_round_robin(clips: list[Path]) -> None:
    with StreamSet(clips, queue=2) as streams:
        streams.start()
        time.sleep(0.5)  # both queues full
        first = next(streams.batches(4, 1.0))
    assert [item.stream for item in first] == [0, 1, 0, 1]
    assert [item.frame.index for item in first] == [0, 0, 1, 1]


def test_a_batch_waits_at_most_max_wait(clips: list[Path]) -> None:
    with StreamSet(clips[:1], queue=2, max_frames=2) as streams:
        streams.start()
        t0 = time.perf_counter()
        batches = list(streams.batches(8, 0.2))  # never 8 frames: the wait bounds it
        elapsed = time.perf_counter() - t0
    assert sum(len(b) for b in batches) == 2 and elapsed < 5.0


def test_publish_records_latency_latest_and_calls_hooks(clips: list[Path]) -> None:
    got: list[Annotated] = []
    with StreamSet(clips) as streams:
        streams.subscribe(got.append)
        assert streams.latest(0) is None
        streams.start()
        for batch in streams.batches(2, 0.01):
            for item in batch:
                time.sleep(0.002)
                streams.publish(
                    Annotated(item.stream, item.frame, (f"frame {item.frame.index}",), "x"),
                    item.decoded,
                )
        stats = streams.stats()
        latest = streams.latest(1)
    assert len(got) == 5 * PER_SCENE
    assert latest is not None and latest.stream == 1 and latest.index == 3 * PER_SCENE - 1
    rgb = latest.rgb()  # the astronaut scene, as RGB
    assert rgb.shape == (*SIZE, 3) and rgb.dtype == np.uint8
    reference = scene("astronaut", *SIZE, PER_SCENE - 1).astype(np.float32)
    assert np.abs(rgb.astype(np.float32) - reference).mean() < 12.0
    for s in stats:
        assert isinstance(s, StreamStats)
        assert s.frames == s.decoded and s.fps > 0 and s.finished
        assert 0.002 <= s.latency_p50 <= s.latency_p99 < 30.0


def test_one_bad_stream_stops_alone(clips: list[Path], tmp_path: Path) -> None:
    whole = make_clip(tmp_path / "whole.mkv", *SIZE, 6)
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size * 2 // 3])
    with StreamSet([clips[0], cut]) as streams:
        streams.start()
        seen = [item.stream for batch in streams.batches(2, 0.01) for item in batch]
        good, bad = streams.stats()
    assert seen.count(0) == 2 * PER_SCENE and good.error is None
    assert 0 < seen.count(1) < 12 and bad.error is not None and bad.decoded == seen.count(1)
    assert "ends early" in bad.error or "did not decode" in bad.error


def test_a_size_change_mid_stream_stops_that_stream(clips: list[Path], tmp_path: Path) -> None:
    first = make_clip(tmp_path / "first.ts", *SIZE, 2)
    second = make_clip(tmp_path / "second.ts", 96, 128, 2)
    joined = tmp_path / "joined.ts"  # MPEG-TS concatenates: the size changes at frame 4
    joined.write_bytes(first.read_bytes() + second.read_bytes())
    with StreamSet([joined, clips[0]]) as streams:
        streams.start()
        seen = [(item.stream, item.frame.index) for b in streams.batches(1) for item in b]
        changed, good = streams.stats()
    assert [i for s, i in seen if s == 0] == [0, 1, 2, 3]
    assert [i for s, i in seen if s == 1] == list(range(2 * PER_SCENE))
    assert changed.error is not None and "size changes are not supported" in changed.error
    assert good.error is None


def test_a_live_stream_drops_alone_and_memory_stays_bounded(
    clips: list[Path], tmp_path: Path
) -> None:
    total = 40
    data = make_clip(tmp_path / "live.ts", *SIZE, total // 2).read_bytes()
    fifo = tmp_path / "camera"
    os.mkfifo(fifo)

    def feed() -> None:  # the camera: everything at once, faster than the consumer
        with open(fifo, "wb") as pipe:
            pipe.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        # a FIFO standing for a camera: live by choice (a pipe is read to its end otherwise)
        with StreamSet([fifo, clips[0]], queue=2, live=[True, None]) as streams:
            assert [s.info.live for s in streams.sources] == [True, False]
            streams.start()
            taken: dict[int, list[int]] = {0: [], 1: []}
            for batch in streams.batches(1):
                time.sleep(0.05)  # a slow model
                for item in batch:
                    taken[item.stream].append(item.frame.index)
                peak = max(len(s.queue) for s in streams._streams)
                assert peak <= 2
            live, file = streams.stats()
    finally:
        writer.join(timeout=30)
    assert live.dropped >= 1 and len(taken[0]) + live.dropped == total == live.decoded
    assert taken[0] == sorted(taken[0])
    assert taken[1] == list(range(2 * PER_SCENE)) and file.dropped == 0


def test_a_source_that_does_not_open_closes_the_others(clips: list[Path], tmp_path: Path) -> None:
    with pytest.raises(VideoError, match="no video at"):
        StreamSet([clips[0], tmp_path / "none.mp4"])
    with pytest.raises(VideoError, match="no video source"):
        StreamSet([])
    with StreamSet(clips[:1]) as streams, pytest.raises(VideoError, match="max_batch"):
        next(streams.batches(0))


def test_inline_streams_decode_in_the_readers_thread(clips: list[Path], tmp_path: Path) -> None:
    """start(inline=True): no decoder thread for a file; frames() decodes in the thread that
    iterates it, with the same counters, frames and failures; batches() refuses."""
    whole = make_clip(tmp_path / "whole.mkv", *SIZE, 6)
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size * 2 // 3])
    with StreamSet([clips[0], cut]) as streams:
        streams.start(inline=True)
        assert not [t for t in threading.enumerate() if t.name.startswith("copyless-stream")]
        with pytest.raises(VideoError, match="needs the decoder threads"):
            next(streams.batches())
        means = [float(item.frame.planes[0].mean()) for item in streams.frames(0)]
        readers = set()
        bad = []
        for item in streams.frames(1):
            readers.add(threading.current_thread().name)
            bad.append(item.frame.index)
        with pytest.raises(VideoError, match="already being read"):
            next(streams.frames(0))
        good_stats, bad_stats = streams.stats()
    assert means == pytest.approx(_luma_means(clips[0]))
    assert good_stats.decoded == 2 * PER_SCENE and good_stats.error is None
    assert bad == list(range(len(bad))) and 0 < len(bad) < 12
    assert bad_stats.error is not None and bad_stats.decoded == len(bad)


def test_close_waits_for_an_inline_reader_inside_the_decoder(clips: list[Path]) -> None:
    """close() from another thread while a reader decodes: the reader ends at its next
    step and the sources close after the frame it was decoding (no decode on a closed
    container)."""
    streams = StreamSet([clips[1]])
    streams.start(inline=True)
    got: list[int] = []
    started = threading.Event()

    def read() -> None:
        for item in streams.frames(0):
            got.append(item.frame.index)
            started.set()
            time.sleep(0.02)

    reader = threading.Thread(target=read)
    reader.start()
    assert started.wait(10)
    streams.close()
    reader.join(10)
    assert not reader.is_alive()
    assert got == list(range(len(got))) and len(got) < 3 * PER_SCENE
