"""VideoSource: decoder planes without a copy where the lines allow it, stream facts, and
clear errors for sources that are not (complete) videos."""

from __future__ import annotations

import os
from pathlib import Path

import av
import numpy as np
import pytest

from copyless.vision._video import VideoError, VideoSource, is_live
from video_helpers import make_clip


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 128-wide clip (128-byte lines: no padding) and a 72-wide one (padded lines)."""
    root = tmp_path_factory.mktemp("video")
    return {
        "packed": make_clip(root / "packed.mp4", 48, 128, frames_per_scene=3),
        "padded": make_clip(root / "padded.mkv", 48, 72, frames_per_scene=3),
    }


def test_planes_are_the_decoders_memory_when_lines_are_not_padded(clips: dict[str, Path]) -> None:
    with VideoSource(clips["packed"]) as source:
        info = source.info
        assert (info.width, info.height, info.input_format) == (128, 48, "i420")
        assert (info.yuv_matrix, info.yuv_range, info.codec, info.live) == (
            "bt601", "limited", "h264", False)  # fmt: skip
        frames = list(source.frames())
    assert [f.index for f in frames] == list(range(6))
    frame = frames[0]
    assert [p.shape for p in frame.planes] == [(48, 128), (24, 64), (24, 64)]
    assert not frame.copied
    for plane, array in zip(frame.frame.planes, frame.planes, strict=True):
        assert np.shares_memory(array, np.frombuffer(plane, np.uint8))
    yuv = frame.frame.to_ndarray(format="yuv420p")  # PyAV's own copy, for comparison
    assert np.array_equal(yuv[:48], frame.planes[0])


def test_padded_lines_are_compacted_once(clips: dict[str, Path]) -> None:
    with VideoSource(clips["padded"]) as source:
        frame = next(source.frames())
    assert frame.copied and frame.frame.planes[0].line_size > 72
    assert [p.shape for p in frame.planes] == [(48, 72), (24, 36), (24, 36)]
    assert all(p.flags.c_contiguous for p in frame.planes)
    yuv = frame.frame.to_ndarray(format="yuv420p")
    assert np.array_equal(yuv[:48], frame.planes[0])


def test_nv12_planes_are_what_pyav_reformat_gives(clips: dict[str, Path]) -> None:
    with VideoSource(clips["packed"], planes="nv12") as source:
        assert source.info.input_format == "nv12"
        frame = next(source.frames(limit=1))
    y, uv = frame.planes
    assert (y.shape, uv.shape) == ((48, 128), (24, 64, 2))
    with av.open(str(clips["packed"])) as container:  # the decoder's I420, reformatted
        ref = next(container.decode(video=0)).reformat(format="nv12")
    for ours, plane in zip((y, uv.reshape(24, 128)), ref.planes, strict=True):
        lines = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)
        assert np.array_equal(ours, lines[: ours.shape[0], : ours.shape[1]])


def test_limit_stops_decoding(clips: dict[str, Path]) -> None:
    with VideoSource(clips["packed"]) as source:
        assert len(list(source.frames(limit=2))) == 2


def test_sources_that_are_no_video_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match="no video at"):
        VideoSource(tmp_path / "missing.mp4")
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(VideoError, match="cannot open"):
        VideoSource(junk)
    audio = tmp_path / "tone.m4a"
    with av.open(str(audio), "w") as out:
        stream = out.add_stream("aac", rate=16000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp",
                                           layout="mono")  # fmt: skip
        frame.sample_rate = 16000
        for packet in [*stream.encode(frame), *stream.encode()]:
            out.mux(packet)
    with pytest.raises(VideoError, match="has no video track"):
        VideoSource(audio)


def test_a_truncated_file_yields_what_it_has_then_says_so(
    clips: dict[str, Path], tmp_path: Path
) -> None:
    data = clips["padded"].read_bytes()
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(data[: len(data) * 2 // 3])
    got = []
    with VideoSource(cut) as source, pytest.raises(VideoError, match=r"ends early|did not decode"):
        got.extend(f.index for f in source.frames())
    assert got and got == list(range(len(got))) and len(got) < 6


def test_live_sources_are_recognised(tmp_path: Path) -> None:
    """Cameras and network streams are live; files and pipes (a FIFO, ``-``, /dev/stdin)
    are read to their end (issue 40: a pipe taken for a camera dropped 46 of 60 frames)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert is_live("rtsp://camera.local/stream") and is_live("/dev/video0")
    assert not is_live(fifo) and not is_live("-") and not is_live("/dev/stdin")
    assert not is_live(tmp_path / "clip.mp4") and not is_live("file://clip.mp4")


def test_a_size_change_mid_stream_is_refused_after_the_frames_before_it(tmp_path: Path) -> None:
    first = make_clip(tmp_path / "a.ts", 48, 64, frames_per_scene=1).read_bytes()
    second = make_clip(tmp_path / "b.ts", 32, 48, frames_per_scene=1).read_bytes()
    joined = tmp_path / "joined.ts"
    joined.write_bytes(first + second)  # MPEG-TS streams concatenate
    got = []
    with VideoSource(joined) as source, pytest.raises(VideoError, match="is 48x32, the stream"):
        got.extend(f.index for f in source.frames())
    assert got == [0, 1]


def test_padded_planes_are_never_copied(clips: dict[str, Path]) -> None:
    with VideoSource(clips["padded"]) as source:
        assert source.line_sizes() == (128, 64)  # decodes frame 0 now...
        source.padded = True
        frames = list(source.frames(limit=2))
    assert [f.index for f in frames] == [0, 1]  # ...and still yields it first
    frame = frames[0]
    assert not frame.copied
    assert [p.shape for p in frame.planes] == [(48, 128), (24, 64), (24, 64)]
    for plane, array in zip(frame.frame.planes, frame.planes, strict=True):
        assert np.shares_memory(array, np.frombuffer(plane, np.uint8))
    yuv = frame.frame.to_ndarray(format="yuv420p")
    assert np.array_equal(yuv[:48], frame.planes[0][:, :72])
