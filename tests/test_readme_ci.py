"""CI does what the README tells a user, nothing more: every command `.ci/run` runs is one the
README shows, as written (a step CI has and the README lacks fails here), and
`.ci/pythons` installs each Python with the README's own set-up command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands(script: str) -> list[str]:
    """The commands of a shell script: neither comments, blank lines, shell settings nor the
    progress lines it echoes."""
    found = []
    for line in script.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "echo ", "set ", "cd ", "start=")):
            continue
        found.append(line)
    return found


def _readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [line.strip() for block in re.findall(r"^```\n(.*?)^```", text, re.S | re.M)
            for line in block.splitlines()]  # fmt: skip


def test_every_ci_step_is_in_the_readme() -> None:
    steps = _commands((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    assert len(steps) >= 8, steps
    shown = _readme_blocks()
    missing = [step for step in steps if step not in shown]
    assert not missing, f"CI runs these and the README does not show them: {missing}"


def test_the_readme_ci_block_is_what_ci_runs_in_order() -> None:
    steps = _commands((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    shown = _readme_blocks()
    start = shown.index(steps[0])
    assert shown[start : start + len(steps)] == steps


def test_the_other_pythons_install_as_the_readme_says() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 'pip install -q -e ".[all]"' in readme
    pythons = (ROOT / ".ci" / "pythons").read_text(encoding="utf-8")
    installs = [line.strip() for line in _commands(pythons) if "pip install" in line]
    assert installs and all('-m pip install -q -e ".[all]"' in line for line in installs), (
        installs
    )


def test_the_checker_sees_a_step_the_readme_lacks() -> None:
    script = "set -e\necho hi\n.venv/bin/python -m pip install --upgrade pip\n"
    assert _commands(script) == [".venv/bin/python -m pip install --upgrade pip"]
    assert _commands(script)[0] not in _readme_blocks()
