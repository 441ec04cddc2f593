"""Reading and drawing folded-detector outputs; stretching a photo into an input tensor."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import copyless as cl
from copyless.vision import Box, Detection, detections, draw_boxes, draw_detections, stretch


def _output(name: str, rows: np.ndarray) -> cl.NpuTensor:
    dtype = cl.DataType.INT64 if rows.dtype == np.int64 else cl.DataType.FLOAT32
    info = cl.NpuTensorInfo(name, dtype, cl.TensorDirection.OUTPUT, cl.TensorType.HW,
                            cl.MemoryLayout.GENERIC, rows.shape)  # fmt: skip
    return cl.NpuTensor(info, rows, cl.MemoryType.USER_POINTER_CMA)


def test_detections_reads_the_first_count_rows() -> None:
    boxes = np.zeros((4, 4), np.float32)
    boxes[:2] = [[10, 20, 30, 40], [1, 2, 3, 4]]
    scores = np.array([0.9, 0.6, 7, 7], np.float32)  # rows past the count are stale
    classes = np.array([1, 5, 0, 0], np.int64)
    points = np.arange(40, dtype=np.float32).reshape(4, 10)
    found = detections(_output("boxes", boxes), _output("scores", scores),
                       _output("classes", classes), ["a", "b"], count=2,
                       landmarks=_output("landmarks", points))  # fmt: skip
    assert [d.label for d in found] == ["b", "class5"]
    assert found[0].box == Box(10, 20, 30, 40, pytest.approx(0.9))
    assert found[0].points[:2] == ((0.0, 1.0), (2.0, 3.0)) and len(found[1].points) == 5
    assert found[0].line() == "box: 10.0 20.0 30.0 40.0 1 b 0.900"
    assert detections(boxes, scores, classes, [], count=0) == []
    with pytest.raises(ValueError, match="5 detections"):
        detections(boxes, scores, classes, ["a"], count=5)


def test_draw_detections_outlines_labels_and_points(tmp_path) -> None:
    image = np.full((120, 160, 3), 200, np.uint8)
    det = Detection(Box(40, 50, 100, 110, 0.87), 0, "face", ((70.0, 80.0),))
    path = draw_detections(image, [det], tmp_path / "d.png")
    drawn = np.asarray(Image.open(path).convert("RGB"))
    assert (image == 200).all()  # the input is left alone
    changed = (drawn != image).any(axis=2)
    assert changed[80, 40] and changed[80, 99] and changed[50, 70]  # left, right, top sides
    assert changed[80, 70] and not changed[80, 60]  # the landmark dot, the inside
    assert changed[45, 42]  # the label tab above the box
    with pytest.raises(ValueError, match="uint8"):
        draw_detections(image.astype(np.float32), [det], tmp_path / "x.png")  # type: ignore[arg-type]


def test_stretch_copies_same_size_and_resizes_otherwise(image_tensor, photo) -> None:
    small = np.ascontiguousarray(photo[:224, :224])
    tensor, array = image_tensor("rgbx", 224)
    assert stretch(small, tensor) == (1.0, 1.0)
    assert (array[0, ..., :3] == small).all() and (array[0, ..., 3] == 0).all()
    planar, values = image_tensor("float", 224)
    sx, sy = stretch(photo, planar)
    assert (sx, sy) == (640 / 224, 480 / 224)
    assert abs(float(values.mean()) - float(photo.mean())) < 1.0 and values.min() >= 0


@pytest.mark.parametrize(("name", "magic"), [("out.jpg", b"\xff\xd8\xff"), ("out.PNG", b"\x89PNG"),
                                             ("out.webp", b"RIFF")])  # fmt: skip
def test_drawings_are_written_in_the_format_their_extension_names(tmp_path, name, magic) -> None:
    image = np.full((40, 60, 3), 90, np.uint8)
    det = Detection(Box(5, 5, 30, 30, 0.5), 0, "face")
    assert draw_detections(image, [det], tmp_path / name).read_bytes().startswith(magic)
    assert draw_boxes(image, [det.box], tmp_path / f"b{name}").read_bytes().startswith(magic)


def test_an_unknown_extension_is_refused_before_drawing(tmp_path) -> None:
    image = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match=r"out\.gif: unknown image extension '\.gif'"):
        draw_detections(image, [], tmp_path / "out.gif")
    with pytest.raises(ValueError, match="unknown image extension"):
        draw_boxes(image, [], tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
