"""The whole text-detection path on the real PP-OCRv4 detector and a real page of text.

letterbox (float planar, pixel units) -> ImageNet normalisation (what the runner does for a
CPU view) -> onnxruntime -> text_boxes -> draw_boxes. The model runs directly under
onnxruntime here: the vision layer must not depend on the runner.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import rapidocr_onnxruntime
import skimage.data
from PIL import Image

import copyless as cl
from copyless.vision import draw_boxes, letterbox, text_boxes

DETECTOR = Path(rapidocr_onnxruntime.__file__).parent / "models" / "ch_PP-OCRv4_det_infer.onnx"
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1) * 255.0
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1) * 255.0


@pytest.mark.slow
def test_ppocr_detector_finds_the_lines_of_a_page(tmp_path: Path) -> None:
    page = np.repeat(skimage.data.page()[..., None], 3, axis=2)  # 191 x 384 printed text
    pixels = np.zeros((1, 3, 640, 640), np.float32)
    info = cl.NpuTensorInfo(
        "x", cl.DataType.FLOAT32, cl.TensorDirection.INPUT, cl.TensorType.CPU,
        cl.MemoryLayout.NCHW, pixels.shape,
    )
    box = letterbox(page, cl.NpuTensor(info, pixels, cl.MemoryType.USER_POINTER_NON_CMA), size=640)
    pixels -= MEAN
    pixels /= STD
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(DETECTOR), options, providers=["CPUExecutionProvider"])
    (prob,) = session.run(None, {session.get_inputs()[0].name: pixels})
    assert prob.shape == (1, 1, 640, 640)

    boxes = text_boxes(prob, box)
    # the page: a title, five lines of prose, one line of code (the detector finds 7 here)
    assert 6 <= len(boxes) <= 10
    for found in boxes:
        assert 0 <= found.x0 < found.x1 <= 384 and 0 <= found.y0 < found.y1 <= 191
        assert found.score >= 0.5
        assert found.width > 3 * found.height  # text lines are wide
    for line_centre in (22, 57, 74, 92, 110, 127, 183):  # rows of the printed lines
        assert any(b.y0 < line_centre < b.y1 and b.width > 150 for b in boxes), line_centre
    title = boxes[0]  # sorted top to bottom
    assert title.y1 < 45 and 250 < title.x1 < 320  # "Region-based segmentation" ends at ~290

    out = draw_boxes(page, boxes, tmp_path / "page.png")
    with Image.open(out) as png:
        assert png.size == (384, 191)
