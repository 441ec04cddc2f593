"""copyless-video with users' own models compiled for images (RGBx, not the clip's planes):
a YOLOv8n (letterboxed frames, boxes back in the frame's pixels: the boxes copyless-detect
finds on the same decoded frame) and an LR-ASPP segmenter (classes per frame)."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from copyless.apps import detect, video
from copyless.model import compile_model
from user_models import export
from video_helpers import make_clip

pytestmark = pytest.mark.slow
pytest.importorskip("torch")


def _rows(capsys: pytest.CaptureFixture[str], kind: str) -> list[dict[str, object]]:
    lines = capsys.readouterr().out.splitlines()
    return [row for row in map(json.loads, (x for x in lines if x.startswith("{")))
            if row["type"] == kind]  # fmt: skip


def test_a_yolo_compiled_for_images_finds_on_video_what_it_finds_on_the_frames(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", 240, 320, frames_per_scene=2)
    model = compile_model(export("yolov8n"), tmp_path / "yolo.rai", input_format="rgbx",
                          mean=(0, 0, 0), std=(255, 255, 255), score_threshold=0.1)  # fmt: skip
    out = tmp_path / "boxes.mp4"
    assert video.main(["-i", str(clip), "-m", str(model), "-o", str(out), "--json",
                       "--runner", "onnxruntime"]) == 0  # fmt: skip
    frames = _rows(capsys, "frame")
    assert len(frames) == 4 and out.stat().st_size > 0
    with av.open(str(clip)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    for index in (0, 3):
        photo = tmp_path / f"frame{index}.png"
        Image.fromarray(decoded[index]).save(photo)
        assert detect.main(["-i", str(photo), "-m", str(model), "--json",
                            "--runner", "onnxruntime"]) == 0  # fmt: skip
        want = _rows(capsys, "detection")
        got = frames[index]["detections"]
        assert isinstance(got, list) and len(got) == len(want) > 0
        boxes = np.array([[d["x0"], d["y0"], d["x1"], d["y1"]] for d in got])
        ref = np.array([[d["x0"], d["y0"], d["x1"], d["y1"]] for d in want])
        np.testing.assert_allclose(boxes, ref, atol=0.2)
        assert (boxes[:, 2] <= 320.0).all() and (boxes[:, 3] <= 240.0).all()


def test_a_segmenter_compiled_for_images_counts_classes_per_frame(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", 120, 160, frames_per_scene=1)
    model = compile_model(export("lraspp_mobilenet_v3_large"), tmp_path / "seg.rai",
                          input_format="rgbx", mean=(123.7, 116.3, 103.5),
                          std=(58.4, 57.1, 57.4))  # fmt: skip
    out = tmp_path / "painted.mp4"
    assert video.main(["-i", str(clip), "-m", str(model), "--json", "-o", str(out)]) == 0
    frames = _rows(capsys, "frame")
    assert len(frames) == 2
    with av.open(str(clip)) as container:
        source = [f.to_ndarray(format="yuv420p") for f in container.decode(video=0)]
    with av.open(str(out)) as container:
        written = [f.to_ndarray(format="yuv420p") for f in container.decode(video=0)]
    assert len(written) == 2
    for frame, before, after in zip(frames, source, written, strict=True):
        classes = frame["classes"]
        assert isinstance(classes, list) and classes
        assert abs(sum(c["fraction"] for c in classes) - 1.0) < 1e-3
        assert sum(c["pixels"] for c in classes) == 120 * 160
        # the mask is painted into the video: where its classes (not the background) cover
        # the frame, the written frame is not the source re-encoded (below the banner)
        covered = sum(c["fraction"] for c in classes if c["class_id"] != 0)
        assert covered > 0.5, classes  # this random-weight model's answer on this clip
        diff = np.abs(after[20:].astype(int) - before[20:].astype(int)).mean()
        assert diff > 5.0, diff
