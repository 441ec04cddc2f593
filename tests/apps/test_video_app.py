"""copyless-video end to end: clips encoded from real photos, the built-in model compiled for
them, labels per scene, the annotated output, live sources dropping frames, bad input."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import av
import numpy as np
import pytest

from copyless.apps import video
from copyless.apps._video_tasks import builtin_for
from copyless.model import compile_model, zoo
from copyless.vision._video import VideoSource
from video_helpers import EXPECTED, identity_net, make_clip

SIZE = (240, 320)
PER_SCENE = 3
LINE = re.compile(r"^frame (\d+): (\d+) (.+) (\d\.\d{3})$", re.M)
BLOCK = [
    r"^decode {18}\d+\.\d{3} ms / frame$",
    r"^preprocess {14}\d+\.\d{3} ms / frame$",
    r"^infer {19}\d+\.\d{3} ms / frame$",
    r"^postprocess {13}\d+\.\d{3} ms / frame$",
    r"^total {19}\d+\.\d{3} ms / frame$",
    r"^throughput \(pipeline\) {3}\d+\.\d{3} FPS$",
]


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("app") / "clip.mp4", *SIZE, PER_SCENE)


def _frames(out: str) -> dict[int, int]:
    return {int(m.group(1)): int(m.group(2)) for m in LINE.finditer(out)}


def _check_scenes(labels: dict[int, int]) -> None:
    for index, label in labels.items():
        assert label in EXPECTED["chelsea" if index < PER_SCENE else "coffee"], (index, label)


def test_every_frame_labelled_and_written(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "annotated.mp4"
    assert video.main(["-i", str(clip), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    labels = _frames(text)
    assert sorted(labels) == list(range(2 * PER_SCENE))
    _check_scenes(labels)
    block = text.strip().splitlines()[-7:]
    for pattern, line in zip(BLOCK, block, strict=False):
        assert re.match(pattern, line), line
    assert block[-1].split() == ["frames", str(2 * PER_SCENE)]
    with av.open(str(out)) as container:
        written = [f.to_ndarray(format="gray") for f in container.decode(video=0)]
    assert len(written) == 2 * PER_SCENE and written[0].shape == SIZE
    band = written[0][: SIZE[0] // 12]
    assert band.mean() < 80 and band.max() > 180  # the label: light text on a dark band
    with VideoSource(clip) as source:  # the built-in model for this clip is cached
        model = builtin_for("efficientnet-lite0", source.info)
        stamp = model.stat().st_mtime_ns
        assert builtin_for("efficientnet-lite0", source.info) == model
        assert model.stat().st_mtime_ns == stamp
    assert model.name.startswith("efficientnet-lite0-i420-")


def test_an_nv12_model_gets_nv12_planes_and_the_same_labels(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = compile_model(
        zoo.build("efficientnet-lite0", progress=False), tmp_path / "nv12.rai",
        input_format="nv12", input_size=SIZE, input_crop=0.875, mean=(127,) * 3, std=(128,) * 3,
    )  # fmt: skip
    assert video.main(["-i", str(clip), "-m", str(model), "-n", "4", "--slots", "3"]) == 0
    labels = _frames(capsys.readouterr().out)
    assert sorted(labels) == [0, 1, 2, 3]
    _check_scenes(labels)


def test_openvino_runner(clip: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert video.main(["-i", str(clip), "--runner", "openvino", "-n", "4"]) == 0
    _check_scenes(_frames(capsys.readouterr().out))


def test_a_model_for_another_size_is_refused_with_the_fix(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = compile_model(zoo.build("efficientnet-lite0", progress=False), tmp_path / "m.rai",
                          input_format="i420", input_size=(120, 160))  # fmt: skip
    assert video.main(["-i", str(clip), "-m", str(model)]) == 2
    assert "--input-format i420 --input-size 240x320" in capsys.readouterr().err


def test_bad_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(os.urandom(2048))
    assert video.main(["-i", str(junk)]) == 2
    assert "error: cannot open" in capsys.readouterr().err
    assert video.main(["-i", str(tmp_path / "none.mp4")]) == 2
    assert "error: no video at" in capsys.readouterr().err


def test_a_truncated_file_keeps_the_frames_before_the_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = make_clip(tmp_path / "whole.mkv", *SIZE, PER_SCENE)
    data = whole.read_bytes()
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "partial.mp4"
    assert video.main(["-i", str(cut), "-o", str(out)]) == 1
    captured = capsys.readouterr()
    labels = _frames(captured.out)
    assert labels and sorted(labels) == list(range(len(labels))) and len(labels) < 2 * PER_SCENE
    _check_scenes(labels)
    assert "throughput (pipeline)" in captured.out
    assert re.search(r"error: .*(ends early|did not decode)", captured.err)
    with av.open(str(out)) as container:  # finished and playable, with every frame classified
        assert sum(1 for _ in container.decode(video=0)) == len(labels)


def test_a_live_source_drops_what_the_model_cannot_keep_up_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    total = 24
    stream = make_clip(tmp_path / "live.ts", *SIZE, total // 2).read_bytes()
    fifo = tmp_path / "camera"
    os.mkfifo(fifo)

    def feed() -> None:  # the camera: everything at once, faster than any model
        with open(fifo, "wb") as pipe:
            pipe.write(stream)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        status = video.main(["-i", str(fifo), "--queue", "1", "--slots", "1"])
    finally:
        writer.join(timeout=30)
    text = capsys.readouterr().out
    assert status == 0
    done = _frames(text)
    dropped = int(re.search(r"^dropped {17}(\d+) ", text, re.M).group(1))  # type: ignore[union-attr]
    assert dropped >= 1 and len(done) + dropped == total
    assert list(done) == sorted(done) and np.all(np.diff(list(done)) >= 1)


def test_a_model_that_is_no_classifier_is_refused(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = compile_model(identity_net(8, 8), tmp_path / "id.rai", input_format="i420",
                          input_size=SIZE)  # fmt: skip
    assert video.main(["-i", str(clip), "-m", str(model)]) == 2
    assert "[B, classes] logits or a [B, 1, h, w] text" in capsys.readouterr().err


def test_the_built_in_text_detector_prints_and_draws_boxes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clip = make_clip(tmp_path / "page.mp4", *SIZE, 2, scenes=("page",))
    out = tmp_path / "boxes.mp4"
    assert video.main(["-i", str(clip), "-m", "ppocr-det", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    counts = [int(n) for n in re.findall(r"^frame \d+: (\d+) text boxes$", text, re.M)]
    assert len(counts) == 2 and all(n >= 3 for n in counts), text
    boxes = re.findall(r"^  box \((\d+), (\d+)\) - \((\d+), (\d+)\) (\d\.\d\d)$", text, re.M)
    assert len(boxes) == sum(counts)
    for x0, y0, x1, y1, _ in boxes:
        assert 0 <= int(x0) < int(x1) <= SIZE[1] and 0 <= int(y0) < int(y1) <= SIZE[0]
    with av.open(str(out)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 2


def test_a_stream_cut_mid_frame_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = make_clip(tmp_path / "whole.ts", *SIZE, PER_SCENE)
    with av.open(str(whole)) as container:  # cut in the middle of the second scene's keyframe
        packets = [p for p in container.demux(video=0) if p.size and p.pts]
        packet = max(packets, key=lambda p: p.size)
        cut_at = packet.pos + packet.size // 2
    cut = tmp_path / "cut.ts"
    cut.write_bytes(whole.read_bytes()[:cut_at])
    assert video.main(["-i", str(cut)]) == 1
    captured = capsys.readouterr()
    assert len(_frames(captured.out)) >= PER_SCENE
    assert re.search(r"^decoder errors {10}[1-9]", captured.out, re.M)
    assert "the stream is damaged or ends mid-frame" in captured.err


def test_odd_frame_sides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """FFV1 keeps odd sides: chroma planes are ceil(H/2) x ceil(W/2); the output drops the
    last row and column (4:2:0 encoders need even sides) but keeps every frame."""
    clip = make_clip(tmp_path / "odd.mkv", 97, 131, 2, codec="ffv1")
    out = tmp_path / "odd.mp4"
    assert video.main(["-i", str(clip), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    labels = _frames(text)
    assert sorted(labels) == [0, 1, 2, 3]
    for index, label in labels.items():
        assert label in EXPECTED["chelsea" if index < 2 else "coffee"]
    # 131-pixel lines are padded by the decoder: the built-in model takes them as they are
    assert "copied" not in text
    with av.open(str(out)) as container:
        frames = list(container.decode(video=0))
    assert len(frames) == 4 and (frames[0].width, frames[0].height) == (130, 96)


def test_a_compact_model_on_padded_lines_copies_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clip = make_clip(tmp_path / "narrow.mp4", 96, 136, 2)
    model = compile_model(
        zoo.build("efficientnet-lite0", progress=False), tmp_path / "compact.rai",
        input_format="i420", input_size=(96, 136), mean=(127,) * 3, std=(128,) * 3,
    )  # fmt: skip
    assert video.main(["-i", str(clip), "-m", str(model)]) == 0
    text = capsys.readouterr().out
    assert len(_frames(text)) == 4
    assert re.search(r"^copied {18}4 frames \(padded plane lines compacted\)$", text, re.M)
