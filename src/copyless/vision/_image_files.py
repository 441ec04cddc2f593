"""Which files a list of inputs names as images: the one rule every app applies to folders.

* A file named directly is always taken, whatever its name: decoding it says whether it is
  an image (a ``.dat`` that holds a PNG is read; a ``.jpg`` that holds text is one error).
* A folder is walked recursively, in sorted order; a file in it is taken when its suffix is
  one of :data:`IMAGE_SUFFIXES` (every format :func:`~copyless.vision.decode` reads), and
  every other entry is named in :attr:`ImageFiles.skipped` with the reason: another
  suffix, not a regular file (a pipe or a socket would block or mean nothing), a broken
  link, a folder that cannot be listed, a folder already listed through a link (a loop,
  or the same folder twice). Nothing is left out silently.
* A glob (``*``, ``?``, ``[...]``, ``**``) is expanded, each match then taken as above.
* Each file once (the first time it is named), in the order the inputs name them.

An input that names nothing (a missing path, a glob that matches nothing) is a
:class:`FileNotFoundError` naming it; a list with no image at all is one too, naming what
was skipped.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["IMAGE_SUFFIXES", "ImageFiles", "image_files"]

#: Suffixes a file in a folder is taken for (lower case): JPEG, PNG, WebP, BMP, TIFF, GIF.
IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".webp", ".bmp", ".dib", ".tif", ".tiff", ".gif"}
)


@dataclass(frozen=True, slots=True)
class ImageFiles:
    """The images to read (``paths``, in order) and what the folders held that was not
    taken (``skipped``: ``(path, why)``)."""

    paths: tuple[Path, ...]
    skipped: tuple[tuple[Path, str], ...]

    def skipped_lines(self) -> list[str]:
        """One ``skipped PATH: WHY`` line per entry (what the apps print on stderr)."""
        return [f"skipped {path}: {why}" for path, why in self.skipped]


def image_files(inputs: Iterable[str | os.PathLike[str]]) -> ImageFiles:
    """The images ``inputs`` (files, folders, globs) name, by the module's rules.

    Raises ``FileNotFoundError`` naming an input that names nothing, or, when no image is
    found at all, naming the inputs (and how many entries were skipped)."""
    items = [os.fspath(item) for item in inputs]
    taken: dict[str, Path] = {}
    skipped: list[tuple[Path, str]] = []
    for item in items:
        for path in _named(item):
            st = _stat(path)
            if st is not None and stat.S_ISDIR(st.st_mode):
                for found in _walk(path, skipped):
                    taken.setdefault(os.path.abspath(found), found)
            else:
                taken.setdefault(os.path.abspath(path), path)
    if not taken:
        also = f" ({len(skipped)} other entries skipped)" if skipped else ""
        raise FileNotFoundError(f"no images in {', '.join(items)}{also}")
    return ImageFiles(tuple(taken.values()), tuple(skipped))


def _named(item: str) -> list[Path]:
    """The paths one input names: itself, or a glob's matches (sorted)."""
    if glob.has_magic(item):
        matches = sorted(glob.glob(item, recursive=True))
        if not matches:
            raise FileNotFoundError(f"{item}: no file matches")
        return [Path(m) for m in matches]
    if not os.path.lexists(item):
        raise FileNotFoundError(f"no image or folder at {item}")
    return [Path(item)]


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()  # follows links: a link to a folder is a folder
    except OSError:
        return None


def _walk(root: Path, skipped: list[tuple[Path, str]]) -> Iterator[Path]:
    """The image files under ``root`` (sorted, recursive, links followed once per folder)."""
    seen: dict[tuple[int, int], Path] = {}
    stack = [root]
    while stack:
        folder = stack.pop()
        st = _stat(folder)
        if st is None:
            skipped.append((folder, "cannot be read"))
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            skipped.append((folder, f"a folder loop: already listed as {seen[key]}"))
            continue
        seen[key] = folder
        try:
            names = sorted(os.listdir(folder))
        except OSError as exc:
            skipped.append((folder, f"cannot be listed ({exc.strerror or exc})"))
            continue
        subfolders = []
        for name in names:
            path = folder / name
            kind = _kind(path)
            if kind == "folder":
                subfolders.append(path)
            elif kind == "image":
                yield path
            else:
                skipped.append((path, kind))
        stack.extend(reversed(subfolders))  # depth first, in sorted order


def _kind(path: Path) -> str:
    """``"folder"``, ``"image"``, or why the entry is skipped."""
    st = _stat(path)
    if st is None:
        return "a broken link" if path.is_symlink() else "cannot be read"
    if stat.S_ISDIR(st.st_mode):
        return "folder"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return "image"
    return f"not an image suffix ({suffix or 'none'}; name the file to read it anyway)"
