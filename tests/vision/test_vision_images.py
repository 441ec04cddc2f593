"""The one image reader (issue 40): EXIF orientation, 16-bit and float samples, colour modes,
every format Pillow opens, Pillow images and arrays; and the one folder-listing rule.

References are what Pillow shows for the same file (``ImageOps.exif_transpose`` then RGB)
and the same pixels in 8 bits.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import skimage.data
from PIL import Image, ImageOps

from copyless.vision import IMAGE_SUFFIXES, decode, image_files, image_size


@pytest.fixture(scope="module")
def pixels() -> npt.NDArray[np.uint8]:
    """A 48x64 cut of the astronaut: not square, so a wrong turn shows in the shape."""
    return np.ascontiguousarray(skimage.data.astronaut()[100:196:2, 150:278:2])


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def _with_orientation(pixels: npt.NDArray[np.uint8], fmt: str, orientation: int) -> bytes:
    image = Image.fromarray(pixels)
    exif = image.getexif()
    exif[0x0112] = orientation
    quality = {"quality": 95} if fmt == "JPEG" else {}
    return _encode(image, fmt, exif=exif.tobytes(), **quality)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "TIFF"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_as_pillow_shows_it(
    pixels: npt.NDArray[np.uint8], fmt: str, orientation: int
) -> None:
    data = _with_orientation(pixels, fmt, orientation)
    shown = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    reference = np.asarray(shown, dtype=np.int16)
    got = decode(data)
    assert got.shape == reference.shape and got.flags.c_contiguous
    tolerance = 3 if fmt in ("JPEG", "WEBP") else 0  # libjpeg-turbo vs Pillow's libjpeg
    assert np.abs(got.astype(np.int16) - reference).max() <= tolerance
    assert image_size(data) == got.shape[:2]  # the header read agrees, without decoding


@pytest.mark.parametrize("orientation", [6, 8])
def test_min_size_is_in_upright_pixels(pixels: npt.NDArray[np.uint8], orientation: int) -> None:
    big = np.asarray(Image.fromarray(pixels).resize((640, 480)))  # stored 640 wide, 480 high
    data = _with_orientation(big, "JPEG", orientation)
    smaller = decode(data, min_size=(300, 200))  # upright: 640 high, 480 wide
    assert smaller.shape[:2] == (320, 240)  # a 1/2 DCT scale covers 300x200 upright


def test_sixteen_bit_greyscale_gives_the_same_pixels_as_in_eight_bits(
    pixels: npt.NDArray[np.uint8], tmp_path: Path
) -> None:
    grey = pixels[..., 1]
    for fmt in ("PNG", "TIFF"):
        path = tmp_path / f"scan.{fmt.lower()}"
        Image.fromarray(grey.astype(np.uint16) * 257).save(path, fmt)
        np.testing.assert_array_equal(decode(path), np.dstack([grey] * 3))
        with Image.open(path) as opened:
            assert opened.mode.startswith("I;16")
            # Pillow's own RGB conversion clips 16-bit samples: the bug this reader avoids
            assert np.asarray(opened.convert("RGB")).mean() > grey.mean() + 50


def test_sixteen_bit_and_float_rgb_tiffs_give_the_same_pixels(
    pixels: npt.NDArray[np.uint8],
) -> None:
    tifffile = pytest.importorskip("tifffile")
    for samples in (pixels.astype(np.uint16) * 257, (pixels / 255).astype(np.float32)):
        buffer = io.BytesIO()
        tifffile.imwrite(buffer, samples, photometric="rgb")
        np.testing.assert_array_equal(decode(buffer.getvalue()), pixels)
        assert image_size(buffer.getvalue()) == pixels.shape[:2]


def test_float_greyscale_tiff_is_scaled_from_zero_to_one(pixels: npt.NDArray[np.uint8]) -> None:
    grey = pixels[..., 0]
    data = _encode(Image.fromarray((grey / 255).astype(np.float32)), "TIFF")
    np.testing.assert_array_equal(decode(data)[..., 2], grey)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "BMP", "TIFF", "GIF"])
def test_every_format_pillow_opens(pixels: npt.NDArray[np.uint8], fmt: str) -> None:
    data = _encode(Image.fromarray(pixels), fmt)
    reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)
    got = decode(data)
    assert np.abs(got.astype(np.int16) - reference).max() <= (3 if fmt == "JPEG" else 0)


def test_a_gif_s_first_frame(pixels: npt.NDArray[np.uint8]) -> None:
    frames = [Image.fromarray(pixels), Image.fromarray(255 - pixels)]
    data = _encode(frames[0], "GIF", save_all=True, append_images=frames[1:])
    first = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    np.testing.assert_array_equal(decode(data), first)


@pytest.mark.parametrize("mode", ["L", "1", "P", "CMYK", "LA", "RGBA", "YCbCr"])
def test_colour_modes_convert_as_pillow_shows_them(
    pixels: npt.NDArray[np.uint8], mode: str
) -> None:
    image = Image.fromarray(pixels).convert(mode)
    fmt = {"CMYK": "TIFF", "YCbCr": "JPEG"}.get(mode, "PNG")
    data = _encode(image, fmt)
    opened = Image.open(io.BytesIO(data))
    over_white = Image.new("RGBA", opened.size, (255, 255, 255, 255))
    shown = Image.alpha_composite(over_white, opened.convert("RGBA")).convert("RGB")
    diff = np.abs(decode(data).astype(np.int16) - np.asarray(shown, dtype=np.int16))
    assert diff.max() <= (3 if fmt == "JPEG" else 1)


def test_transparency_is_composited_over_white(pixels: npt.NDArray[np.uint8]) -> None:
    """Dark text on a transparent background stays readable (dropping the alpha channel
    leaves whatever the transparent pixels hold: black here)."""
    rgba = np.zeros((*pixels.shape[:2], 4), np.uint8)
    rgba[10:20, 10:50, 3] = 255  # black "text", opaque; the rest transparent black
    got = decode(_encode(Image.fromarray(rgba), "PNG"))
    assert (got[10:20, 10:50] == 0).all() and (got[:10] == 255).all()
    palette = Image.fromarray(rgba).convert("P")
    palette.info["transparency"] = palette.getpixel((0, 0))
    got = decode(_encode(palette, "PNG", transparency=palette.getpixel((0, 0))))
    assert (got[:10] == 255).all()


def test_pillow_images_and_arrays_follow_the_same_rules(pixels: npt.NDArray[np.uint8]) -> None:
    grey = pixels[..., 0]
    expected = np.dstack([grey] * 3)
    for given in (
        Image.fromarray(grey),
        Image.fromarray(grey.astype(np.uint16) * 257),
        grey,
        grey[..., None],
        grey.astype(np.uint16) * 257,
        grey / 255.0,
        np.dstack([grey, grey, grey, np.full_like(grey, 255)]),
    ):
        np.testing.assert_array_equal(decode(given), expected)
    assert decode(pixels) is pixels  # C-contiguous uint8 RGB: no copy
    turned = Image.open(io.BytesIO(_with_orientation(pixels, "PNG", 6)))
    assert decode(turned).shape == (64, 48, 3)


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (np.zeros((4, 4, 5), np.uint8), "(H, W, 3)"),
        (np.zeros((0, 4, 3), np.uint8), "has no pixels"),
        (np.zeros((4, 4, 3), np.complex64), "dtype complex64"),
    ],
)
def test_arrays_no_image_holds_are_refused(given: npt.NDArray[np.generic], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        decode(given)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda d, j: d / "empty.jpg", "empty: 0 bytes"),
        (lambda d, j: d / "cut.jpg", "not a decodable image"),
        (lambda d, j: d, "a directory"),
        (lambda d, j: Path("/dev/zero"), "not a regular file"),
    ],
    ids=["0-byte", "truncated-jpeg", "directory", "device"],
)
def test_bad_files_are_one_clear_value_error(tmp_path: Path, pixels, make, words: str) -> None:
    jpeg = _encode(Image.fromarray(pixels), "JPEG")
    (tmp_path / "empty.jpg").write_bytes(b"")
    (tmp_path / "cut.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    path = make(tmp_path, jpeg)
    for read in (decode, image_size):
        if read is image_size and path.name == "cut.jpg":
            continue  # the header is whole: its size reads, the decode refuses
        with pytest.raises(ValueError, match=words) as caught:
            read(path)
        assert str(caught.value).startswith(str(path))


def test_a_tiny_and_a_very_thin_image_decode(tmp_path: Path) -> None:
    for size in ((1, 1), (100000, 1), (1, 100000)):
        path = tmp_path / f"{size[0]}x{size[1]}.png"
        Image.new("RGB", size, (10, 20, 30)).save(path)
        assert decode(path).shape == (size[1], size[0], 3)
        assert image_size(path) == (size[1], size[0])


# -- image_files: the folder rule ---------------------------------------------------------
def _tree(root: Path) -> None:
    (root / "b").mkdir(parents=True)
    for name in ("a.JPG", "c.webp", "d.bmp", "e.tif", "f.gif", "g.png", "notes.txt", ".DS_Store"):
        (root / name).write_bytes(b"x")
    (root / "b" / "inner.jpeg").write_bytes(b"x")
    (root / "b" / "loop").symlink_to(root)  # a folder loop
    (root / "broken.png").symlink_to(root / "gone.png")
    os.mkfifo(root / "pipe.png")


def test_a_folder_lists_every_image_format_and_names_what_it_skips(tmp_path: Path) -> None:
    _tree(tmp_path)
    found = image_files([tmp_path])
    names = [p.relative_to(tmp_path).as_posix() for p in found.paths]
    # a folder's files first, then its subfolders (os.walk's order), each sorted
    assert names == ["a.JPG", "c.webp", "d.bmp", "e.tif", "f.gif", "g.png", "b/inner.jpeg"]
    why = {p.relative_to(tmp_path).as_posix(): reason for p, reason in found.skipped}
    assert why.keys() == {".DS_Store", "notes.txt", "broken.png", "pipe.png", "b/loop"}
    assert "not an image suffix (.txt" in why["notes.txt"]
    assert why["broken.png"] == "a broken link" and why["pipe.png"] == "not a regular file"
    assert why["b/loop"].startswith("a folder loop: already listed as")
    assert all(line.startswith("skipped ") for line in found.skipped_lines())


def test_files_named_directly_are_taken_whatever_their_suffix(tmp_path: Path) -> None:
    _tree(tmp_path)
    found = image_files([tmp_path / "notes.txt", tmp_path / "g.png", str(tmp_path / "*.gif")])
    assert [p.name for p in found.paths] == ["notes.txt", "g.png", "f.gif"]
    again = image_files([tmp_path / "g.png", tmp_path, tmp_path / "g.png"])  # each once
    assert [p.name for p in again.paths].count("g.png") == 1


def test_inputs_that_name_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no image or folder at"):
        image_files([tmp_path / "none.png"])
    with pytest.raises(FileNotFoundError, match="no file matches"):
        image_files([str(tmp_path / "none*.png")])
    (tmp_path / "only.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"no images in .* \(1 other entries skipped\)"):
        image_files([tmp_path])


def test_the_suffixes_are_what_decode_reads() -> None:
    assert {".jpg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif"} <= IMAGE_SUFFIXES
