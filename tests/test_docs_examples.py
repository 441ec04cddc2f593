"""Every Python example in README.md and docs/ runs as written.

Each page's ```python blocks run in order in one namespace (a reader pastes them one after
the other into one interpreter), in a temporary working directory, on the real models the
rest of the suite uses (built from installed packages, cached). A block fenced
```python notest is not run: it needs what a test machine lacks (an NVIDIA GPU, a Ray
cluster, a server of its own). At most a quarter of all blocks may be notest.

Some pages' printed output is checked too (``OUTPUT_CHECKS`` below): an example that says
what it prints must print it.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# A fence opens at the start of a line; its info string is "python" or "python notest".
FENCE = re.compile(r"^```python(?P<notest>[ \t]+notest)?[ \t]*\n(?P<code>.*?)^```[ \t]*$",
                   re.S | re.M)  # fmt: skip
# Fences the collector would miss: indented ones, or Python under another name.
STRAY = re.compile(r"^(?:[ \t]+```[ \t]*py|```[ \t]*(?:py|py3|pycon|python3|ipython)\b)", re.M)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the line of the opening fence, 1-based
    code: str
    notest: bool


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    return [
        Block(page, text.count("\n", 0, m.start()) + 1, m.group("code"), bool(m.group("notest")))
        for m in FENCE.finditer(text)
    ]


def _pipeline_output(lines: list[str]) -> None:
    """docs/api.md: the Pipeline example prints the photos in order, then the counts."""
    assert len(lines) == 9, lines
    for index, line in enumerate(lines[:8]):
        assert line.startswith(f"{index} ("), line  # in the order of the photos
        expected = ("Egyptian cat", "tabby", "tiger cat") if index % 2 == 0 else ("espresso",)
        assert any(label in line for label in expected), line
    assert lines[8].startswith("items     8 done, 0 failed"), lines[8]


def _readme_output(lines: list[str]) -> None:
    """README.md: the two photos in order with their labels, then the counts."""
    assert len(lines) == 3, lines
    cat, coffee, counts = lines
    name, label = cat.split(" ", 1)
    assert name == "chelsea.png" and label in ("Egyptian cat", "tabby", "tiger cat"), cat
    assert coffee == "coffee.png espresso", coffee
    assert counts.startswith("items     2 done, 0 failed"), counts


def _video_output(lines: list[str]) -> None:
    """docs/guides/video.md: the clip's 60 frames, the cat first."""
    assert len(lines) == 1, lines
    assert lines[0].startswith("60 frames classified,"), lines
    assert any(cat in lines[0] for cat in ("Egyptian cat", "tabby", "tiger cat")), lines


OUTPUT_CHECKS: dict[str, Callable[[list[str]], None]] = {
    "docs/api.md": _pipeline_output,
    "README.md": _readme_output,
    "docs/guides/video.md": _video_output,
}


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def run_page(page: Path) -> list[str]:
    """Runs the page's blocks (notest skipped) in one namespace; returns the printed lines."""
    namespace: dict[str, object] = {"__name__": "__docs__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks(page):
            if not block.notest:
                # blank lines first, so that a traceback's line numbers are the page's
                code = "\n" * block.line + block.code
                exec(compile(code, str(page), "exec"), namespace)
    return out.getvalue().splitlines()


RUNNABLE = [page for page in PAGES if any(not b.notest for b in blocks(page))]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE, ids=_name)
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lines = run_page(page)
    check = OUTPUT_CHECKS.get(_name(page))
    if check is not None:
        check(lines)


def test_examples_are_counted() -> None:
    """Most examples run; the count is printed (pytest -s) and kept in bounds."""
    every = [block for page in PAGES for block in blocks(page)]
    notest = [block for block in every if block.notest]
    print(f"docs examples: {len(every) - len(notest)} executed, {len(notest)} notest, "
          f"{len(every)} in all")  # fmt: skip
    assert len(every) >= 15, "the README and the guides show code"
    assert 4 * len(notest) <= len(every), [f"{_name(b.page)}:{b.line}" for b in notest]
    for page in OUTPUT_CHECKS:
        assert (ROOT / page) in RUNNABLE, f"{page} has no runnable example to check"


def test_no_python_escapes_the_collector() -> None:
    """An indented fence or a ```py fence would silently never run."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        stray = STRAY.search(text)
        where = text.count("\n", 0, stray.start()) + 1 if stray else 0
        assert stray is None, f"{_name(page)}:{where}: fence it as ```python at column 0"


def test_the_collector_finds_and_skips(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```python\nx = 1\n```\n```python notest\nraise SystemExit\n```\n"
        "```python\nprint(x + 1)\n```\n```sh\necho no\n```\n"
    )
    found = blocks(page)
    assert [(b.line, b.notest) for b in found] == [(2, False), (5, True), (8, False)]
    assert run_page(page) == ["2"]  # one namespace, in order, notest skipped
    page.write_text("```python\nx = 1\n\nraise ValueError('line 4')\n```\n")
    with pytest.raises(ValueError) as caught:
        run_page(page)
    assert caught.traceback[-1].lineno + 1 == 4  # the page's own line number
