"""The front door and the site: a short README whose figure is a recorded one, every page
in the site's navigation, benchmark tables generated from their records, the site built by
CI and buildable here."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
DATA = DOCS / "benchmarks" / "data"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "benchmark_hook", DOCS / "hooks" / "benchmarks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_nav_pages(item) for item in nav))
    if isinstance(nav, dict):
        return set().union(*(_nav_pages(value) for value in nav.values()))
    return set()


def _mkdocs_nav() -> Any:
    # mkdocs.yml is plain YAML apart from no custom tags; PyYAML comes with mkdocs.
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert ".venv/bin/python -m pytest" in text  # the test command CI runs
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).exists(), link


def test_the_readme_figure_is_a_recorded_one() -> None:
    """The README quotes the row its record marks as the headline, with its command."""
    quoted = [r for r in _hook().load_records(DATA).values() if "headline" in r]
    assert len(quoted) == 1
    record = quoted[0]
    row = record["rows"][record["headline"]["row"]]
    text = README.read_text(encoding="utf-8")
    assert f"**{row['ratio']:.2f}x**" in text
    assert f"{row['copyless frames/s']} vs\n{row['plain frames/s']}" in text or (
        f"{row['copyless frames/s']} vs {row['plain frames/s']}" in text
    )
    assert record["date"] in text
    assert _hook().runnable(record["command"]).split(" (")[0] in text


def test_every_page_is_in_the_nav() -> None:
    nav = _nav_pages(_mkdocs_nav())
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages == nav
    assert "guides/scripting.md" in nav and "api.md" in nav and "serve.md" in nav


def test_benchmark_records_render() -> None:
    hook = _hook()
    records = hook.load_records(DATA)
    assert len(records) >= 5
    for name, record in records.items():
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", record["date"]), name
        assert record["machine"].get("cpu") and record["load"] and record["source"], name
        # the command the page shows names programs of this checkout (a record keeps the
        # command it ran: copyless-bench NAME, before issue 53, is benchmarks/NAME.py)
        for program in re.findall(r"python (benchmarks/\w+\.py)", hook.runnable(record["command"])):
            assert (ROOT / program).is_file(), (name, program)
    page = (DOCS / "benchmarks" / "index.md").read_text(encoding="utf-8")
    rendered = hook.expand(page, records)
    assert "benchmark-tables" not in rendered
    for record in records.values():
        assert f"### {record['title']}" in rendered
        assert f"**{record['date']}** · CPU: {record['machine']['cpu']}" in rendered


def test_the_hook_renders_a_record(tmp_path: Path) -> None:
    hook = _hook()
    rows = [{"case": "a|b", "ratio": 1.5}, {"case": "c"}]
    record = {"title": "T", "command": "copyless-bench x --n 1", "date": "2026-01-02",
              "machine": {"cpu": "Some CPU", "cores": 2}, "load": "0.5",
              "source": "a test", "rows": rows}  # fmt: skip
    (tmp_path / "one.json").write_text(json.dumps(record))
    records = hook.load_records(tmp_path)
    text = hook.expand("before\n<!-- benchmark-tables: one -->\nafter", records)
    assert "| case | ratio |" in text
    assert "| a\\|b | 1.5 |" in text and "| c | - |" in text
    assert "Some CPU (2 cores)" in text and "load 0.5" in text
    assert "Command: `python benchmarks/x.py --n 1`" in text  # as a checkout program runs now
    assert hook.runnable("copyless-bench spin --frames 5; copyless-bench --model all") == (
        "copyless-bench spin --frames 5; copyless-bench --model all"  # the wheel's suites
    )
    assert hook.runnable("copyless-bench int8 (and copyless-bench ray_batch)") == (
        "python benchmarks/int8.py (and python benchmarks/ray_batch.py)"
    )
    with pytest.raises(KeyError):
        hook.expand("<!-- benchmark-tables: missing -->", records)
    (tmp_path / "bad.json").write_text(json.dumps({"title": "no rows"}))
    with pytest.raises(ValueError, match="missing"):
        hook.load_records(tmp_path)


def test_ci_builds_the_site_and_installs_what_it_needs() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {re.split(r"[<>=\[; ]", r, maxsplit=1)[0] for r in extras["docs"]}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings"} <= names
    assert any("docs" in r for r in extras["test"] if r.startswith("copyless["))
    ci = (ROOT / ".ci" / "run").read_text()
    lint, build, tests = (ci.index("mypy --strict"), ci.index("mkdocs build --strict"),
                          ci.index("python -m pytest"))  # fmt: skip
    assert lint < build < tests


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    reference = (tmp_path / "reference" / "runner" / "index.html").read_text(encoding="utf-8")
    for name in ("copyless.Runner.execute_async", "copyless.Runner.get_tensors_info"):
        assert f'id="{name}"' in reference, name
    assert ":meth:<code>" not in reference  # docs/hooks/roles.py drops Sphinx roles' names
    vision = (tmp_path / "reference" / "vision" / "index.html").read_text(encoding="utf-8")
    assert 'id="copyless.vision.StreamSet"' in vision


def test_the_video_benchmark_writes_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``benchmarks/video.py --json FILE`` writes a record the site renders (the benchmark
    itself is not run here: its writer is given a run's figures)."""
    spec = importlib.util.spec_from_file_location("video_bench", ROOT / "benchmarks" / "video.py")
    assert spec is not None and spec.loader is not None
    video = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(video)
    monkeypatch.setattr(sys, "argv", ["video.py", "--help"])
    with pytest.raises(SystemExit):
        video.main()
    assert "--json FILE" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["video.py", "--frames", "1500", "--json", "run.json"])
    out = tmp_path / "run.json"
    video._write_record(out, "1500 frames x 1 stream(s)", 135.5, 88.5, [1.46, 1.56, 1.75], "0.1")
    records = _hook().load_records(tmp_path)
    record = records["run"]
    assert record["command"] == "python benchmarks/video.py --frames 1500 --json run.json"
    row = {"clip": "1500 frames x 1 stream(s)", "copyless frames/s": 135.5,
           "plain frames/s": 88.5, "ratio": 1.56, "rounds": "1.46-1.75x"}  # fmt: skip
    assert record["rows"] == [row]
    assert record["machine"]["cpu"] and record["machine"]["cores"]
    assert "| 1500 frames x 1 stream(s) | 135.5 | 88.5 | 1.56 | 1.46-1.75x |" in _hook().render(
        record
    )
