"""Calibration images as users have them (model/_calibration.py): any format and size,
greyscale among colour, any count, files or in-memory images; what cannot be read is named
and skipped, one line each, and the rest calibrate the model."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import skimage.data
from compiler_support import conv_net
from PIL import Image

from copyless.model import ResizePolicy, compile_to_memory, precision_of
from copyless.model._calibration import (
    RECOMMENDED,
    ImagePrep,
    calibration_batches,
    calibration_items,
)
from copyless.types import DataType, NpuTensorInfo, OptionError, TensorDirection, TensorType

CALIBRATION = "copyless.model._calibration"


def _info(channels: int = 3, size: int = 32) -> NpuTensorInfo:
    from copyless.types import MemoryLayout

    return NpuTensorInfo("x", DataType.FLOAT32, TensorDirection.INPUT, TensorType.CPU,
                         MemoryLayout.NCHW, (1, channels, size, size))  # fmt: skip


def _mixed_folder(root: Path) -> Path:
    """Photos as a user's folder holds them: JPEG, PNG, WebP, BMP and TIFF of many sizes,
    greyscale and 16-bit and transparent ones among colour, a note, a broken file and a
    hidden one."""
    root.mkdir()
    coffee = Image.fromarray(skimage.data.coffee())
    chelsea = Image.fromarray(skimage.data.chelsea())
    camera = Image.fromarray(skimage.data.camera())  # greyscale
    coffee.resize((400, 300)).save(root / "a-coffee.jpg", quality=85)
    chelsea.resize((90, 160)).save(root / "b-chelsea.png")
    camera.save(root / "c-camera.png")  # mode L
    camera.convert("RGB").resize((64, 48)).save(root / "d-camera.jpg")  # grey, stored as RGB
    grey16 = (np.asarray(camera, np.uint16) * 257).astype(np.uint16)
    Image.fromarray(grey16).save(root / "e-camera16.png")  # 16-bit greyscale
    rgba = chelsea.convert("RGBA")
    rgba.putalpha(128)
    rgba.save(root / "f-chelsea-alpha.png")
    coffee.resize((33, 517)).save(root / "g-coffee.webp")
    chelsea.resize((20, 20)).save(root / "h-chelsea.bmp")
    coffee.save(root / "i-coffee.tiff")
    (root / "notes.txt").write_text("camera roll from the weekend\n")
    (root / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    (root / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")  # hidden: not an image of the user's
    return root


def test_a_users_folder_calibrates_with_the_unreadable_named_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _mixed_folder(tmp_path / "photos")
    with caplog.at_level(logging.WARNING, logger=CALIBRATION):
        model = compile_to_memory(conv_net(size=32), precision="int8", calibration=folder,
                                  mean=(127,) * 3, std=(128,) * 3)  # fmt: skip
    lines = [r.getMessage() for r in caplog.records if r.name == CALIBRATION]
    skipped = [line for line in lines if "skipped" in line]
    assert len(skipped) == 2
    assert any(str(folder / "notes.txt") in line for line in skipped)
    assert any(str(folder / "broken.jpg") in line for line in skipped)
    assert all("\n" not in line for line in lines)
    assert f"calibration: 9 usable images; {RECOMMENDED} or more are recommended" in lines[-1]
    record = precision_of(model.metadata)
    assert record is not None and record["precision"] == "int8"
    # 9 images: too few to hold one in five out; the agreement is measured on them all
    assert record["images_from"] == "calibration (too few to hold any out)"
    assert record["calibration"] == {"images": 9, "greyscale": 3, "skipped": 2}


def test_in_memory_images_calibrate(caplog: pytest.LogCaptureFixture) -> None:
    """Pillow images, uint8/uint16/float arrays, greyscale, RGBA and a stacked batch; a bad
    item is named by its position and skipped."""
    rng = np.random.default_rng(0)
    photo = skimage.data.chelsea()
    items = [
        Image.fromarray(skimage.data.coffee()),
        photo,
        skimage.data.camera(),  # (H, W) greyscale
        photo.astype(np.float32) / 255.0,  # float 0..1
        (photo.astype(np.uint16) * 257),  # 16-bit
        np.concatenate([photo, np.full((*photo.shape[:2], 1), 200, np.uint8)], axis=2),
        rng.integers(0, 256, (4, 50, 70, 3), dtype=np.uint8),  # a stacked batch of 4
        np.zeros(3, np.uint8),  # not an image
    ]
    info = _info()
    with caplog.at_level(logging.WARNING, logger=CALIBRATION):
        images = calibration_batches(calibration_items(items), info, ImagePrep(),
                                     recommended=1)  # fmt: skip
    assert (images.fit_images, images.check_images, images.greyscale) == (8, 2, 1)
    assert images.skipped == ("item 10 (ndarray)",)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("calibration: skipped item 10 (ndarray): an image is (H, W)")
    assert all(batch.shape == (1, 3, 32, 32) and batch.dtype == np.float32
               for batch in images.fit + images.check)  # fmt: skip


def test_greyscale_photos_are_grey_in_every_channel_and_prepared_as_the_model_sees_them() -> None:
    grey = skimage.data.camera()  # 512 x 512
    prep = ImagePrep(mean=(127.0,) * 3, std=(128.0,) * 3,
                     resize=ResizePolicy("crop", crop_fraction=0.875))  # fmt: skip
    images = calibration_batches((grey,), _info(size=224), prep, recommended=1)
    (batch,) = images.check
    assert images.greyscale == 1
    np.testing.assert_array_equal(batch[0, 0], batch[0, 1])
    np.testing.assert_array_equal(batch[0, 1], batch[0, 2])
    # torchvision's Resize(256) + CenterCrop(224) with PIL's bilinear filter
    want = Image.fromarray(grey).convert("RGB").resize((256, 256), Image.BILINEAR)
    want = np.asarray(want.crop((16, 16, 240, 240)), np.float32)
    np.testing.assert_allclose(batch[0].transpose(1, 2, 0), (want - 127) / 128, atol=1e-6)
    # a one-channel model gets the luma of a colour photo
    colour = calibration_batches((skimage.data.coffee(),), _info(channels=1), ImagePrep(),
                                 hold_out=1, recommended=1)  # fmt: skip
    luma = Image.fromarray(skimage.data.coffee()).convert("L").resize((32, 32), Image.BILINEAR)
    np.testing.assert_array_equal(colour.check[0][0, 0], np.asarray(luma, np.float32))


def test_few_images_warn_naming_the_recommended_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from model_helpers import calibration_folder

    few = calibration_folder(tmp_path / "few", count=12)
    with caplog.at_level(logging.WARNING, logger=CALIBRATION):
        images = calibration_batches(calibration_items(few), _info(), ImagePrep())
    assert [r.getMessage() for r in caplog.records] == [
        f"calibration: 12 usable images; {RECOMMENDED} or more are recommended (INT8 ranges "
        "are fitted on them)"
    ]
    assert (images.fit_images, images.check_images) == (10, 2)  # one in five held out
    assert images.check_from == "held-out calibration"


def test_validation_images_are_the_check_set(tmp_path: Path) -> None:
    from model_helpers import calibration_folder

    calibration = calibration_folder(tmp_path / "calibration", count=10)
    validation = calibration_folder(tmp_path / "validation", count=7, seed=3)
    images = calibration_batches(calibration_items(calibration), _info(), ImagePrep(),
                                 validation=calibration_items(validation),
                                 recommended=1)  # fmt: skip
    assert (images.fit_images, images.check_images) == (10, 7)
    assert images.check_from == "validation"


def test_nothing_usable_and_no_such_path_are_refused_in_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.jpg").write_bytes(b"not a jpeg")
    (junk / "b.txt").write_text("hello")
    with pytest.raises(OptionError, match=r"calibration: none of the 2 items is a readable image"):
        compile_to_memory(conv_net(size=32), precision="int8", calibration=junk)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(OptionError, match="calibration: no files in"):
        compile_to_memory(conv_net(size=32), precision="int8", calibration=empty)
    with pytest.raises(OptionError, match="no such directory or image file"):
        compile_to_memory(conv_net(size=32), precision="int8", calibration=tmp_path / "nope")
    with pytest.raises(OptionError, match="calibration: no images given"):
        compile_to_memory(conv_net(size=32), precision="int8", calibration=[])
