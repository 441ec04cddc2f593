"""docs/architecture.md names only what exists.

The page is a map of the source: modules (``copyless.vision``, ``pipeline/_run.py``,
``_queries.py``), classes (`PlanCache`), their members (`JobTable.admit`) and constants
(`MAX_UNCOLLECTED`). Each one it names is looked up here, in the source tree as parsed (no
import of the private modules), so a rename or a removal that leaves the page behind fails.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "copyless"
PAGE = ROOT / "docs" / "architecture.md"

# What the page names that is not copyless's: typing's Protocol; and placeholders the page
# spells out for the reader to fill in ("`_name.py`", "NAME").
NOT_OURS = {"Protocol"}
PLACEHOLDERS = {"_name.py"}

DOTTED = re.compile(r"\bcopyless(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w/.-])((?:[\w]+/)*_?\w+\.(?:py|c))(?::(\w+))?\b")
FOLDER = re.compile(r"`((?:tests|benchmarks|src)/[\w/]*/)`")
TICKED = re.compile(r"`([^`\n]+)`")
CLASSY = re.compile(r"^([A-Z]\w*)(?:\.(\w+))?(?:\(.*\))?$")
PRIVATE_PAIR = re.compile(r"^(_?[a-z]\w*)\.(_?\w+)$")


@dataclass
class Index:
    """Names defined in the source: classes and their members, module-level names, files."""

    members: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    names: set[str] = field(default_factory=set)
    files: dict[str, list[Path]] = field(default_factory=lambda: defaultdict(list))
    defined_in: dict[Path, set[str]] = field(default_factory=lambda: defaultdict(set))


def _class_members(node: ast.ClassDef) -> set[str]:
    found: set[str] = set()
    for item in ast.walk(node):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            found.add(item.target.id)
        elif isinstance(item, ast.Assign):
            found.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
            found.add(item.attr)  # self.x = ...
    return found


def build_index(*roots: Path) -> Index:
    index = Index()
    for root in roots:
        for path in root.rglob("*"):
            if path.suffix in (".py", ".c", ".pyi"):
                index.files[path.name].append(path)
            if path.suffix != ".py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    index.members[node.name] |= _class_members(node)
                    index.names.add(node.name)
                    index.defined_in[path].add(node.name)
            for node in tree.body:
                targets: list[ast.expr] = []
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    index.names.add(node.name)
                    index.defined_in[path].add(node.name)
                elif isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, ast.AnnAssign):
                    targets = [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        index.names.add(target.id)
                        index.defined_in[path].add(target.id)
    return index


def _resolves(dotted: str) -> bool:
    """``copyless.a.b.C.d``: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _file_exists(index: Index, path: str) -> list[Path]:
    """A path as the page writes it: from the repository root (src/, tests/, benchmarks/),
    from src/copyless (``runner/_runner.py``), or a bare file name (``_queries.py``)."""
    if path.startswith(("src/", "tests/", "benchmarks/")):
        return [ROOT / path] if (ROOT / path).exists() else []
    if "/" in path:
        return [SRC / path] if (SRC / path).exists() else []
    return index.files.get(path, [])


def problems(text: str, index: Index) -> list[str]:
    """Every name in ``text`` that the source does not define."""
    found: list[str] = []
    for dotted in sorted(set(DOTTED.findall(text))):
        if "NAME" not in dotted.split(".") and not _resolves(dotted):
            found.append(f"module or attribute {dotted}")
    for path, function in sorted(set(PATH.findall(text))):
        if path in PLACEHOLDERS or "NAME" in path:
            continue
        files = _file_exists(index, path)
        if not files:
            found.append(f"file {path}")
        elif function and not any(function in index.defined_in[f] for f in files):
            found.append(f"{function} in {path}")
    for folder in sorted(set(FOLDER.findall(text))):
        if not (ROOT / folder).is_dir():
            found.append(f"folder {folder}")
    for ticked in sorted(set(TICKED.findall(text))):
        found += _ticked_problems(ticked.strip(), index)
    return found


def _ticked_problems(ticked: str, index: Index) -> list[str]:
    classy = CLASSY.match(ticked)
    if classy:
        name, member = classy.groups()
        if name in NOT_OURS or name == "NAME":
            return []
        if name.isupper():
            return [] if name in index.names else [f"constant {name}"]
        if name not in index.names:
            return [f"class {name}"]
        if member and member not in index.members.get(name, set()):
            return [f"member {name}.{member}"]
        return []
    pair = PRIVATE_PAIR.match(ticked)
    if pair is None or pair.group(2) in ("py", "c"):  # a file name: PATH checks it
        return []
    module, name = pair.groups()
    if module.startswith("_") or name.startswith("_"):
        if module.startswith("_"):  # `_slots.JobSlot`: a name defined in that module
            files = index.files.get(f"{module}.py", [])
            if not any(name in index.defined_in[f] for f in files):
                return [f"{name} in {module}.py"]
        elif not (SRC / module / f"{name}.py").exists():  # `model._graph`
            return [f"module {module}.{name}"]
    return []


@pytest.fixture(scope="module")
def index() -> Index:
    return build_index(SRC, ROOT / "tests")


def test_every_name_on_the_page_exists(index: Index) -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert problems(text, index) == []


def test_the_page_names_enough_to_be_checked(index: Index) -> None:
    """The checks above see the page's names (a broken pattern would pass vacuously)."""
    text = PAGE.read_text(encoding="utf-8")
    assert len(set(DOTTED.findall(text))) >= 3
    assert len(set(PATH.findall(text))) >= 15
    classes = {m.group(1) for t in TICKED.findall(text) if (m := CLASSY.match(t.strip()))}
    assert len(classes) >= 25


@pytest.mark.parametrize(
    "text, problem",
    [
        ("`copyless.vision.NoSuchThing`", "module or attribute copyless.vision.NoSuchThing"),
        ("in runner/_no_such_module.py", "file runner/_no_such_module.py"),
        ("`_no_such_file.py`", "file _no_such_file.py"),
        ("`runner/_factory.py:no_such_function`", "no_such_function in runner/_factory.py"),
        ("`NoSuchPlanCache`", "class NoSuchPlanCache"),
        ("`JobTable.no_such_method(x)`", "member JobTable.no_such_method"),
        ("`NO_SUCH_CONSTANT`", "constant NO_SUCH_CONSTANT"),
        ("`_slots.NoSuchSlot`", "NoSuchSlot in _slots.py"),
        ("`model._no_such_graph`", "module model._no_such_graph"),
        ("`tests/no_such_folder/`", "folder tests/no_such_folder/"),
    ],
)
def test_a_stale_name_is_caught(index: Index, text: str, problem: str) -> None:
    assert problems(text, index) == [problem]


def test_real_names_pass(index: Index) -> None:
    text = ("`copyless.memory.cuda` `runner/_factory.py:backend_name` `JobTable.admit(a, b)` "
            "`MAX_UNCOLLECTED` `_slots.JobSlot` `model._graph` `tests/apps/` `_fast.c` "
            "`Capabilities` `RunnerOptions.own_async_engines` memory/_span.py")  # fmt: skip
    assert problems(text, index) == []
