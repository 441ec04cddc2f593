"""Implementation modules are private (httpx style): a module that is not part of the API is
named ``_*.py`` and reached only through its package's ``__init__`` and ``__all__``.

The public modules are the packages (each exports its API through ``__all__``) and the
applications, which are programs (``python -m copyless.apps.NAME``, console scripts) and
the benchmark suite's modules, which ``copyless-bench`` and its tests address by name. A new
module is private (``_name.py``), or is added here on purpose, with its package's ``__all__``.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import copyless

SOURCE = Path(copyless.__file__).parent

PUBLIC = {
    "copyless.apps",
    "copyless.apps.bench",
    "copyless.apps.bench.cli",
    "copyless.apps.bench.contenders",
    "copyless.apps.bench.gate",
    "copyless.apps.bench.limits",
    "copyless.apps.bench.measure",
    "copyless.apps.bench.models",
    "copyless.apps.bench.peers",
    "copyless.apps.bench.contender",
    "copyless.apps.bench.prefix",
    "copyless.apps.bench.report",
    "copyless.apps.bench.spin",
    "copyless.apps.bench.stages",
    "copyless.apps.bench.suites",
    "copyless.apps.bench.tasks",
    "copyless.apps.bench.timing",
    "copyless.apps.batch",
    "copyless.apps.builtins",
    "copyless.apps.compile",
    "copyless.apps.detect",
    "copyless.apps.video",
    "copyless.apps.infer_async",
    "copyless.apps.zerocopy",
    "copyless.apps.zoo",
    "copyless.apps.ocr",
    "copyless.apps.inference_server",
    "copyless.backends",
    "copyless.ipc",
    "copyless.layout",
    "copyless.memory",
    "copyless.model",
    "copyless.model.postprocess",
    "copyless.model.zoo",
    "copyless.ocr",
    "copyless.pipeline",
    "copyless.ray",
    "copyless.runner",
    "copyless.serve",
    "copyless.types",
    "copyless.vision",
}


def _public_modules() -> set[str]:
    return {
        module.name
        for module in pkgutil.walk_packages(copyless.__path__, "copyless.")
        if not any(part.startswith("_") for part in module.name.split(".")[1:])
    }


def test_no_new_public_module() -> None:
    new = sorted(_public_modules() - PUBLIC)
    assert not new, f"new modules must be private (_name.py) or listed on purpose: {new}"


def test_every_package_all_resolves() -> None:
    """Each package's ``__all__`` names what it really exports, and nothing twice."""
    for name in sorted(_public_modules()):
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        if exported is None or not hasattr(module, "__path__"):
            continue
        assert len(exported) == len(set(exported)), name
        missing = [item for item in exported if not hasattr(module, item)]
        assert not missing, f"{name}.__all__ lists {missing}"


def _imported(
    path: Path, package: list[str], *, typing_too: bool = True
) -> Iterator[tuple[int, list[str]]]:
    """Every module or name ``path`` imports, as dotted parts with relative imports resolved
    (``from ..memory import cuda`` in runner/_x.py gives ``copyless.memory`` and
    ``copyless.memory.cuda``), with the line it is on. ``package``: the dotted parts of the
    package ``path`` belongs to. ``typing_too=False`` leaves out ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if not typing_too and id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = base + (node.module.split(".") if node.module else [])
            yield node.lineno, target
            for alias in node.names:
                yield node.lineno, [*target, alias.name]


def _private_owner(target: list[str]) -> list[str] | None:
    """The package whose private module ``target`` reaches into, or None when it names
    only public modules (``__init__`` and dunders are not private modules)."""
    for index, part in enumerate(target):
        if part.startswith("_") and not part.startswith("__"):
            return target[:index]
    return None


def cross_package_private_imports(root: Path = SOURCE) -> list[str]:
    """Imports of a private module (``_name``) from outside the package that holds it.

    A private module is private to its package and that package's subpackages (``model/zoo``
    may import ``model._graph``); every other importer, a parent included, goes through the
    package's ``__init__`` (``from ..memory import NpuTensor``, not ``..memory._tensor``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        package = ["copyless", *path.relative_to(root).parent.parts]
        for line, target in _imported(path, package):
            owner = _private_owner(target)
            if target[0] == "copyless" and owner is not None and package[: len(owner)] != owner:
                found.append(f"{path.relative_to(root)}:{line} imports {'.'.join(target)}")
    return sorted(set(found))


def test_no_package_imports_another_packages_private_module() -> None:
    found = cross_package_private_imports()
    assert not found, "import through the package's __init__ instead:\n" + "\n".join(found)


_PRIVATE_IMPORT = re.compile(r"^\s*(?:from|import)\s+(copyless(?:\.\w+)*\._\w+)", re.M)


def benchmarks_private_imports(folder: Path) -> list[str]:
    """``file:line module`` for each import of a private copyless module in ``folder``'s
    Python files and shell scripts (their embedded Python)."""
    found = []
    for path in sorted([*folder.glob("*.py"), *folder.glob("*.sh")]):
        text = path.read_text()
        for match in _PRIVATE_IMPORT.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.name}:{line} {match.group(1)}")
    return found


def test_the_benchmarks_import_no_private_module() -> None:
    """What a benchmark runs is what users can run: copyless's public names only (issue 53:
    benchmarks/ imported the apps' private modules)."""
    found = benchmarks_private_imports(Path(__file__).parent.parent / "benchmarks")
    assert not found, "use the public module instead:\n" + "\n".join(found)


def test_the_benchmark_walk_sees_a_private_import(tmp_path: Path) -> None:
    (tmp_path / "b.py").write_text("import os\n    from copyless.apps._models import X\n")
    (tmp_path / "s.sh").write_text("python - <<EOF\nimport copyless.vision._video\nEOF\n")
    (tmp_path / "ok.py").write_text("from copyless.apps.builtins import builtin_model\n")
    assert benchmarks_private_imports(tmp_path) == ["b.py:2 copyless.apps._models",
                                                    "s.sh:2 copyless.vision._video"]


@pytest.mark.parametrize(
    ("where", "source", "reached"),
    [
        ("runner/_x.py", "from ..memory._tensor import NpuTensor\n", True),
        ("runner/_x.py", "from ..memory import _device\n", True),
        ("runner/_x.py", "import copyless.backends._base\n", True),
        ("model/_x.py", "from .postprocess._spec import PostprocessOptions\n", True),
        ("runner/_x.py", "from ..memory import NpuTensor, cuda\n", False),
        ("runner/_x.py", "from ._plan import batch_axis\n", False),
        ("model/zoo/_x.py", "from .._graph import IR_VERSION\n", False),
        ("runner/_x.py", "from ..types import __all__\n", False),
    ],
)
def test_the_import_walk_sees_what_it_must(
    tmp_path: Path, where: str, source: str, reached: bool
) -> None:
    """The walk itself: each import form above is caught (or let through) as it says."""
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert bool(cross_package_private_imports(tmp_path)) is reached


def _module_names(root: Path) -> dict[str, Path]:
    names = {}
    for path in root.rglob("*.py"):
        parts = ["copyless", *path.relative_to(root).with_suffix("").parts]
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the copyless modules it imports, function-level imports and ``if
    TYPE_CHECKING:`` blocks included (a type-only circle is a circle of meaning: the two
    modules cannot be understood apart), a module's own parent packages left out."""
    names = _module_names(root)
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        package = ["copyless", *path.relative_to(root).parent.parts]
        for _line, target in _imported(path, package):
            dotted = ".".join(target)
            while dotted not in names and "." in dotted:
                dotted = dotted.rsplit(".", 1)[0]  # a name imported from a module
            if dotted in names and dotted != name and not name.startswith(dotted + "."):
                graph[name].add(dotted)
    return graph


def import_circles(root: Path = SOURCE) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a circle."""
    graph = _import_graph(root)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in graph[module]:
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return circles


def test_no_import_circle() -> None:
    assert import_circles() == []


def test_the_circle_walk_sees_a_circle(tmp_path: Path) -> None:
    """Two modules that import each other, one of them inside a function, are a circle; so
    are two that import each other only for types."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "__init__.py").write_text("")
    (tmp_path / "bench" / "cli.py").write_text("from . import suites\n")
    (tmp_path / "bench" / "suites.py").write_text("def run():\n    from .cli import main\n")
    (tmp_path / "bench" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .other import X\n"
    )
    (tmp_path / "bench" / "other.py").write_text("from .typed import Y\n")
    assert import_circles(tmp_path) == [
        ["copyless.bench.cli", "copyless.bench.suites"],
        ["copyless.bench.other", "copyless.bench.typed"],
    ]


def class_names(root: Path = SOURCE) -> dict[str, list[str]]:
    """Class name -> where each class of that name is defined (``path:line``)."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where = f"{path.relative_to(root)}:{node.lineno}"
                found.setdefault(node.name, []).append(where)
    return found


def test_no_two_classes_share_a_name() -> None:
    """One name, one concept: two classes of one name (public or private) are two things a
    reader must tell apart by their module (there were two Pipelines, PlanErrors,
    StageTimes and _Bounds)."""
    shared = {name: places for name, places in class_names().items() if len(places) > 1}
    assert not shared, shared


#: The floors of the house (docs/architecture.md, "The layers"): a room imports only rooms on
#: lower floors. ``types`` is the floor every layer reaches: the one owner of what every layer
#: needs and no layer owns (errors, metadata, atomic writes). Rooms on one floor do not import
#: each other. A new package takes a floor here on purpose.
FLOORS = {
    "types": 0,
    "memory": 1,
    "ipc": 2,
    "layout": 2,
    "model": 3,
    "backends": 4,
    "runner": 5,
    "pipeline": 6,
    "vision": 7,
    "ocr": 8,
    "ray": 8,
    "serve": 9,
    "apps": 10,
}


def _room(module: str) -> str | None:
    """``copyless.model.zoo._cache`` -> ``model``; None for the package itself (the front
    door, which re-exports every floor)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward_imports(root: Path = SOURCE) -> list[str]:
    """Imports from a room into a room not below it (function-level and type-only ones too)."""
    found = []
    for module, imported in sorted(_import_graph(root).items()):
        room = _room(module)
        for other in sorted(imported):
            target = _room(other)
            if room is None or target is None or target == room:
                continue
            if FLOORS.get(target, -1) >= FLOORS.get(room, -1):
                found.append(f"{module} imports {other}")
    return found


def test_every_room_has_a_floor() -> None:
    rooms = {path.name for path in SOURCE.iterdir() if (path / "__init__.py").is_file()}
    assert rooms == set(FLOORS), f"give each package a floor: {sorted(rooms ^ set(FLOORS))}"


def test_no_import_runs_up_or_across() -> None:
    assert upward_imports() == []


@pytest.mark.parametrize(
    ("where", "source", "upward"),
    [
        ("model/_x.py", "from ..runner import Runner\n", True),
        ("layout/_x.py", "from ..ipc import send_tensors\n", True),
        ("types/_x.py", "def f():\n    from ..model import write_atomically\n", True),
        ("model/zoo/_x.py", "from ...types import write_atomically\n", False),
        ("apps/_x.py", "from ..serve import InferenceServer\n", False),
    ],
)
def test_the_floor_walk_sees_an_upward_import(
    tmp_path: Path, where: str, source: str, upward: bool
) -> None:
    for room in FLOORS:
        (tmp_path / room).mkdir()
        (tmp_path / room / "__init__.py").write_text("")
    (tmp_path / "model" / "zoo").mkdir()
    (tmp_path / "model" / "zoo" / "__init__.py").write_text("")
    (tmp_path / where).write_text(source)
    assert bool(upward_imports(tmp_path)) is upward
