"""decode(): JPEG through libjpeg-turbo (with DCT-domain downscaling), others through Pillow."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from copyless.vision import decode


def _mean_abs_diff(a: npt.NDArray[np.uint8], b: npt.NDArray[np.uint8]) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def test_jpeg_photo_decodes_to_rgb(photo: npt.NDArray[np.uint8], photo_jpeg: Path) -> None:
    image = decode(photo_jpeg)
    assert image.shape == (480, 640, 3)
    assert image.dtype == np.uint8
    assert image.flags.c_contiguous and image.flags.writeable
    assert _mean_abs_diff(image, photo) < 2.0  # quality-95 JPEG of the same pixels
    # channel order: the cat photo is warm (more red than blue on average)
    assert image[..., 0].mean() > image[..., 2].mean() + 10


def test_bytes_and_str_path_give_the_same_pixels(photo_jpeg: Path) -> None:
    from_path = decode(str(photo_jpeg))
    from_bytes = decode(photo_jpeg.read_bytes())
    from_memoryview = decode(memoryview(bytearray(photo_jpeg.read_bytes())))
    np.testing.assert_array_equal(from_path, from_bytes)
    np.testing.assert_array_equal(from_path, from_memoryview)


def test_png_is_lossless(tmp_path: Path, photo: npt.NDArray[np.uint8]) -> None:
    path = tmp_path / "chelsea.png"
    Image.fromarray(photo).save(path)
    np.testing.assert_array_equal(decode(path), photo)


def test_grayscale_png_becomes_rgb(tmp_path: Path) -> None:
    gray = np.arange(64 * 48, dtype=np.uint32).reshape(48, 64).astype(np.uint8)
    path = tmp_path / "gray.png"
    Image.fromarray(gray).save(path)
    image = decode(path)
    assert image.shape == (48, 64, 3)
    for c in range(3):
        np.testing.assert_array_equal(image[..., c], gray)


@pytest.mark.parametrize(
    ("min_size", "expected"),
    [
        (None, (800, 1000)),
        ((256, 256), (400, 500)),  # 1/2: 1/4 would give 200 rows < 256
        ((100, 100), (100, 125)),  # 1/8 is the smallest scale
        ((150, 200), (200, 250)),  # 1/4: width 125 at 1/8 is < 200
        ((801, 10), (800, 1000)),  # larger than the image: full size, never upscaled
    ],
)
def test_min_size_decodes_a_smaller_jpeg(
    photo: npt.NDArray[np.uint8],
    encode_jpeg: Callable[..., bytes],
    min_size: tuple[int, int] | None,
    expected: tuple[int, int],
) -> None:
    big = np.asarray(Image.fromarray(photo).resize((1000, 800), Image.BILINEAR))
    data = encode_jpeg(big)
    image = decode(data, min_size=min_size)
    assert image.shape == (*expected, 3)
    # a DCT-domain downscale is an area average: compare with Pillow's box reduction
    reference = np.asarray(Image.fromarray(big).resize(expected[::-1], Image.BOX))
    assert _mean_abs_diff(image, reference) < 3.0


def test_min_size_is_validated(photo_jpeg: Path) -> None:
    with pytest.raises(ValueError, match="min_size"):
        decode(photo_jpeg, min_size=(-1, 10))


def test_cmyk_jpeg_falls_back_to_pillow(tmp_path: Path, photo: npt.NDArray[np.uint8]) -> None:
    path = tmp_path / "cmyk.jpg"
    Image.fromarray(photo).convert("CMYK").save(path, format="JPEG", quality=95)
    image = decode(path)
    assert image.shape == (480, 640, 3)
    assert _mean_abs_diff(image, photo) < 6.0


def test_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        decode(tmp_path / "nope.jpg")


def test_corrupt_file_raises_value_error_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "garbage.png"
    path.write_bytes(b"not an image at all" * 10)
    with pytest.raises(ValueError, match=r"garbage\.png"):
        decode(path)


def test_truncated_jpeg_raises_value_error(tmp_path: Path, photo_jpeg: Path) -> None:
    data = photo_jpeg.read_bytes()
    path = tmp_path / "truncated.jpg"
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match=r"truncated\.jpg"):
        decode(path)
