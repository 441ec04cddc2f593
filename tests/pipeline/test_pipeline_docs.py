"""docs/api.md's Pipeline example runs as written and says what it claims."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _example() -> str:
    text = DOC.read_text()
    section = text[text.index("## Pipeline (`copyless.Pipeline`"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "the Pipeline section has a python example"
    return match.group(1)


@pytest.mark.slow
def test_the_documented_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_example(), str(DOC), "exec"), {"__name__": "__docs__"})
    lines = out.getvalue().splitlines()
    assert len(lines) == 9, lines
    for index, line in enumerate(lines[:8]):
        assert line.startswith(f"{index} ("), line  # in the order of the photos
        expected = ("Egyptian cat", "tabby", "tiger cat") if index % 2 == 0 else ("espresso",)
        assert any(label in line for label in expected), line
    assert lines[8].startswith("items     8 done, 0 failed")
