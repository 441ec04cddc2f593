"""ImageNet labels and the bundled photos."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import skimage.data
from PIL import Image

from copyless.model import zoo
from copyless.types import UnsupportedError


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    yield tmp_path


def test_labels() -> None:
    names = zoo.labels()
    assert len(names) == 1000 and names[134] == names[517] == "crane"  # the classic duplicate
    assert names[281].startswith("tabby")
    assert names[285] == "Egyptian cat"
    assert names[967] == "espresso"
    short = zoo.labels(short=True)
    assert short[281] == "tabby" and short[0] == "tench"
    names.clear()  # callers get their own list
    assert len(zoo.labels()) == 1000


@pytest.mark.parametrize(
    ("name", "loader"),
    [
        ("chelsea", skimage.data.chelsea),
        ("coffee", skimage.data.coffee),
        ("page", skimage.data.page),
        ("astronaut", skimage.data.astronaut),
    ],
)
def test_png_is_the_bundled_image(name: str, loader: object) -> None:
    path = zoo.photo_path(name)
    assert path.suffix == ".png" and zoo.photo_path(f"{name}.png") == path
    np.testing.assert_array_equal(np.asarray(Image.open(path)), loader())  # type: ignore[operator]


def test_jpeg_written_once_into_cache(cache_dir: Path) -> None:
    path = zoo.photo_path("coffee.jpg")
    assert path == cache_dir / "photos" / "coffee.jpg"
    stamp = path.stat().st_mtime_ns
    assert zoo.photo_path("coffee.jpg") == path and path.stat().st_mtime_ns == stamp
    with Image.open(path) as image:
        assert image.format == "JPEG"
        decoded = np.asarray(image, dtype=np.float32)
    assert decoded.shape == skimage.data.coffee().shape
    assert np.abs(decoded - skimage.data.coffee()).mean() < 3.0
    gray = zoo.photo_path("page.jpeg")
    with Image.open(gray) as image:
        assert image.mode == "L" and image.size == (384, 191)


def test_unknown_photo() -> None:
    with pytest.raises(UnsupportedError, match="chelsea"):
        zoo.photo_path("lena")
    assert zoo.photo_names() == ["astronaut", "chelsea", "coffee", "page"]
