"""copyless-batch by the model's task: a detector's rows hold its boxes as lists in each
image's pixels (the boxes copyless-detect prints for the same photo), a segmenter's the
classes of its mask with their fractions; a local Ray each run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("ray")
pytest.importorskip("torch")
import pyarrow.parquet as pq

from copyless.apps import batch, detect
from copyless.model import compile_model
from user_models import export, matched, photos

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("batch-photos")
    for name, pixels in photos().items():
        Image.fromarray(pixels).save(root / f"{name}.png")
    return root


def test_a_detector_writes_boxes_per_image(folder: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    model = compile_model(export("yolov8n"), tmp_path / "yolo.rai", input_format="rgbx",
                          mean=(0, 0, 0), std=(255, 255, 255), score_threshold=0.1)  # fmt: skip
    out = tmp_path / "boxes.parquet"
    assert batch.main([str(folder), "-o", str(out), "-m", str(model), "--batch-size", "2"]) == 0
    rows = {Path(r["path"]).stem: r for r in pq.read_table(out).to_pylist()}
    assert set(rows) == set(photos()) and all(r["error"] is None for r in rows.values())
    capsys.readouterr()
    for name, row in rows.items():
        assert len(row["boxes"]) == len(row["scores"]) == len(row["class_ids"])
        assert detect.main(["-i", str(folder / f"{name}.png"), "-m", str(model), "--json"]) == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        want = [x for x in lines if x["type"] == "detection"]
        assert len(want) == len(row["boxes"])
        ref = np.array([[d["x0"], d["y0"], d["x1"], d["y1"]] for d in want]).reshape(-1, 4)
        ref_ids = np.array([d["class_id"] for d in want], np.int64)
        boxes, ids = np.array(row["boxes"]).reshape(-1, 4), np.array(row["class_ids"], np.int64)
        # the same boxes (equal scores may come in another order: engines break ties apart)
        assert matched(ref, ref_ids, boxes, ids, 0.99) == matched(boxes, ids, ref, ref_ids,
                                                                   0.99) == 1.0  # fmt: skip


def test_a_segmenter_writes_its_mask_classes_per_image(folder: Path, tmp_path: Path) -> None:
    model = compile_model(export("lraspp_mobilenet_v3_large"), tmp_path / "seg.rai",
                          input_format="rgbx", mean=(123.7, 116.3, 103.5),
                          std=(58.4, 57.1, 57.4))  # fmt: skip
    out = tmp_path / "masks.parquet"
    assert batch.main([str(folder), "-o", str(out), "-m", str(model)]) == 0
    table = pq.read_table(out)
    assert table.column_names == ["path", "class_ids", "labels", "fractions", "error"]
    for row in table.to_pylist():
        assert row["class_ids"] and abs(sum(row["fractions"]) - 1.0) < 1e-3
        assert all(0 <= c < 21 for c in row["class_ids"])
