"""copyless-detect against ultralytics' own ``YOLO("model.onnx").predict``: a YOLOv8n and a
YOLO11n built from their yaml (random weights, no download), exported by ultralytics, on the
same photos at the same thresholds give the same boxes (IoU >= 0.9, same class).
ultralytics runs in a child process (importing it patches ``PIL.Image.open`` process-wide).

The photos are real (scikit-image's), at the model's input size (square, no resize: both
sides see the same pixels) and padded (a 320 x 213 photo: ultralytics' letterbox and
copyless's put the same 114-grey border on it, the boxes come back in the photo's pixels).
A photo that needs resizing differs by the resize filter (OpenCV's INTER_LINEAR in
ultralytics, PIL's antialiased filter in copyless), which moves a random model's boxes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from copyless.apps import detect
from copyless.model import compile_model, task_of
from user_models import export, matched, photos, ultralytics_version, yolo_predict

pytestmark = pytest.mark.slow

CONF, IOU, SIDE = 0.1, 0.7, 320


def _photos(folder: Path) -> list[Path]:
    """Square crops at the model's side, and one 320 x 213 (letterboxed with padding)."""
    paths = []
    for name, pixels in photos().items():
        image = Image.fromarray(pixels)
        side = min(image.size)
        left, top = (image.width - side) // 2, (image.height - side) // 2
        square = image.crop((left, top, left + side, top + side)).resize((SIDE, SIDE))
        paths.append(folder / f"{name}.png")
        square.save(paths[-1])
    wide = Image.fromarray(photos()["chelsea"]).resize((SIDE, 213))
    paths.append(folder / "chelsea-wide.png")
    wide.save(paths[-1])
    return paths


def _ours(model: Path, photo: Path, capsys: pytest.CaptureFixture[str]) -> tuple[np.ndarray, ...]:
    assert detect.main(["-i", str(photo), "-m", str(model), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    found = [row for row in rows if row.get("type") == "detection"]
    boxes = np.array([[d["x0"], d["y0"], d["x1"], d["y1"]] for d in found]).reshape(-1, 4)
    return boxes, np.array([d["class_id"] for d in found], np.int64)


@pytest.mark.parametrize("name", ["yolov8n", "yolo11n"])
def test_the_same_boxes_as_ultralytics_predict(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ultralytics_version()  # skips without ultralytics
    onnx_path = export(name)
    model = compile_model(onnx_path, tmp_path / f"{name}.rai", input_format="rgbx",
                          mean=(0, 0, 0), std=(255, 255, 255), score_threshold=CONF,
                          iou_threshold=IOU)  # fmt: skip
    record = task_of(model)
    assert (record.task, record.head, record.classes) == ("detect", "yolo", 80)
    assert str(record.preprocessing.resize) == "letterbox:114"
    photos_ = _photos(tmp_path)
    compared = 0
    for photo, (ref_boxes, ref_classes) in zip(
        photos_, yolo_predict(onnx_path, photos_, CONF, IOU, SIDE), strict=True
    ):
        boxes, classes = _ours(model, photo, capsys)
        assert abs(len(boxes) - len(ref_boxes)) <= max(1, len(ref_boxes) // 100), photo.name
        assert matched(ref_boxes, ref_classes, boxes, classes) >= 0.99, photo.name
        assert matched(boxes, classes, ref_boxes, ref_classes) >= 0.99, photo.name
        compared += len(ref_boxes)
    assert compared >= 100  # the thresholds leave boxes to compare
