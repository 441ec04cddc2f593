"""One way to write a file atomically (copyless.types): a reader sees the old file or the new
one, never half of one; a failed or dropped write leaves nothing behind."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest

import copyless
from copyless.types import AtomicFile, atomic_path, write_atomically

SOURCE = Path(copyless.__file__).parent


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_write_atomically_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    target.write_bytes(b"old")
    write_atomically(target, b"new")
    assert target.read_bytes() == b"new" and _leftovers(tmp_path) == []


def test_nothing_lands_before_commit_and_an_error_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), AtomicFile(target) as out:
        out.file.write(b"half")
        assert target.read_bytes() == b"old"
        raise RuntimeError("cut short")
    assert target.read_bytes() == b"old" and _leftovers(tmp_path) == []


def test_commit_once_and_a_dropped_file_leaves_nothing(tmp_path: Path) -> None:
    out = AtomicFile(tmp_path / "a.bin")
    out.file.write(b"a")
    assert out.commit() == tmp_path / "a.bin" and out.done
    with pytest.raises(ValueError, match="already committed"):
        out.commit()
    dropped = AtomicFile(tmp_path / "b.bin")
    dropped.file.write(b"b")
    del dropped
    gc.collect()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_atomic_path_keeps_the_suffix_and_cleans_up(tmp_path: Path) -> None:
    target = tmp_path / "model.rai"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".rai" and not tmp.exists()
        tmp.write_bytes(b"compiled")
    assert target.read_bytes() == b"compiled" and _leftovers(tmp_path) == []
    with pytest.raises(OSError), atomic_path(tmp_path / "x.onnx"):
        pass  # the writer wrote nothing: nothing to rename
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "y.onnx") as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("cut short")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.rai"]


def test_every_atomic_write_goes_through_the_one_owner() -> None:
    """No module but types/_files.py renames a temporary file into place (there were five
    ways, in model/, model/zoo, runner/, backends/, ray/ and apps/)."""
    owner = SOURCE / "types" / "_files.py"
    pattern = re.compile(r"\bos\.(?:replace|rename)\(|\.(?:replace|rename)\(\s*(?:tmp|scratch)")
    found = [
        f"{path.relative_to(SOURCE)}:{text.count(chr(10), 0, match.start()) + 1}"
        for path in sorted(SOURCE.rglob("*.py"))
        if path != owner
        for text in [path.read_text(encoding="utf-8")]
        for match in pattern.finditer(text)
    ]
    assert found == [], f"write through copyless.types.AtomicFile / atomic_path: {found}"
