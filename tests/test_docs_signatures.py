"""Every signature the pages write out matches the code's.

A page that spells a call's parameters in an inline code span (`OcrPipeline(generation=None,
*, angle=True, ...)`) is checked against ``inspect.signature`` of the object the name
resolves to among copyless's public packages: the parameters it names exist, in that order,
on the same side of ``*``; every required one is named; a default it writes as a Python
value equals the real default. Spans that are calls rather than signatures (``f(..., x=1)``)
and defaults written as placeholders (``<the socket's>``, ``...``, ``DIR``) are left alone.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PACKAGES = ("copyless", "copyless.model", "copyless.model.zoo", "copyless.ocr", "copyless.ray",
            "copyless.serve", "copyless.vision", "copyless.pipeline", "copyless.ipc",
            "copyless.layout", "copyless.memory", "copyless.runner", "copyless.types",
            "copyless.backends")  # fmt: skip

# `Name(params)` or `A.b(params)`, optionally `-> result`, alone in its code span.
SPAN = re.compile(r"`(?P<name>[A-Za-z_]\w*(?:\.\w+)*)\((?P<params>[^`]*)\)(?:\s*->[^`]*)?`")
# An argument in capitals is a value (`JobHandle(SUCCESS, job_id)`, `StreamSet.latest(S)`):
# the span is a call, not a signature.
VALUE = re.compile(r"^[A-Z][A-Z0-9_]*$")
PARAM = re.compile(r"^(?P<stars>\*{0,2})(?P<name>\w*)\s*(?::[^=]*)?(?:=\s*(?P<default>.+))?$")
# Names a page uses for something other than the public object of that name.
ELSEWHERE = {
    # the hook each backend module defines; the registry's create_backend takes a name first
    ("docs/architecture.md", "create_backend"),
}
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


@dataclass(frozen=True)
class Documented:
    page: Path
    line: int
    name: str
    params: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.name}({', '.join(self.params)})"


def split_params(text: str) -> tuple[str, ...]:
    """``a, b=(1, 2), c="x,y"`` -> ``("a", "b=(1, 2)", 'c="x,y"')``."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return tuple(item for item in items if item)


def documented(pages: list[Path]) -> list[Documented]:
    """The signature spans on ``pages``: not calls (``f(..., x=1)``, ``f(SUCCESS)``)."""
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in SPAN.finditer(text):
            params = split_params(match.group("params"))
            if (params and params[0] == "...") or any(VALUE.match(p) for p in params):
                continue
            line = text.count("\n", 0, match.start()) + 1
            found.append(Documented(page, line, match.group("name"), params))
    return found


def _public() -> dict[str, list[Any]]:
    """Each name the public packages export -> the distinct objects it names."""
    table: dict[str, list[Any]] = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            seen = table.setdefault(name, [])
            if all(value is not other for other in seen):
                seen.append(value)
    return table


PUBLIC = _public()
VALUES: dict[str, Any] = {name: found[0] for name, found in PUBLIC.items() if len(found) == 1}


def resolve(name: str) -> Callable[..., Any] | None:
    """The one public callable ``name`` (``A`` or ``A.b``) names, else None."""
    head, *rest = name.split(".")
    if head == "copyless" and rest:
        head, *rest = rest
    found = PUBLIC.get(head, [])
    if len(found) != 1:
        return None
    target = found[0]
    for part in rest:
        target = getattr(target, part, None)
    return target if callable(target) else None


def _value(text: str) -> tuple[bool, Any]:
    """(True, the value) where ``text`` is a Python value (a literal or a public name's
    attribute: ``RunnerType.VAIML``); (False, None) for a placeholder."""
    if text == "..." or text.startswith("<"):
        return False, None
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    head, *rest = text.split(".")
    if head not in VALUES:  # a placeholder the page spells for the reader (DIR, S, ...)
        return False, None
    value = VALUES[head]
    for part in rest:
        value = getattr(value, part)
    return True, value


def problems(doc: Documented, target: Callable[..., Any]) -> list[str]:
    """What ``doc`` says that the signature of ``target`` contradicts."""
    real = inspect.signature(target)
    params = [p for p in real.parameters.values() if p.name not in ("self", "cls")]
    names = [p.name for p in params]
    out, keyword_only, position = [], False, -1
    named = set()
    for item in doc.params:
        match = PARAM.match(item)
        if item == "...":
            continue
        if match is None:
            out.append(f"cannot read parameter {item!r}")
            continue
        if item == "*":
            keyword_only = True
            continue
        name = match.group("name")
        named.add(name)
        if name not in names:
            out.append(f"no parameter {name!r} (the code has {', '.join(names)})")
            continue
        if names.index(name) < position:
            out.append(f"{name!r} is out of order (the code has {', '.join(names)})")
        position = names.index(name)
        param = params[position]
        if param.kind in _VARIADIC:
            continue
        if keyword_only != (param.kind is _KEYWORD_ONLY):
            side = "after" if param.kind is _KEYWORD_ONLY else "before"
            out.append(f"{name!r} is {side} '*' in the code")
        default = match.group("default")
        if default is None:
            continue
        if param.default is inspect.Parameter.empty:
            out.append(f"{name!r} has no default in the code")
            continue
        known, value = _value(default.strip())
        if known and (value != param.default or type(value) is not type(param.default)):
            out.append(f"{name}={default.strip()}, but the code's default is {param.default!r}")
    for param in params:
        required = param.default is inspect.Parameter.empty and param.kind not in _VARIADIC
        if required and param.name not in named and "..." not in doc.params:
            out.append(f"required parameter {param.name!r} is not written")
    return out


def checked() -> list[tuple[Documented, Callable[..., Any]]]:
    pairs = []
    for doc in documented(PAGES):
        if (doc.page.relative_to(ROOT).as_posix(), doc.name) in ELSEWHERE:
            continue
        target = resolve(doc.name)
        if target is not None:
            pairs.append((doc, target))
    return pairs


@pytest.mark.parametrize(("doc", "target"), checked(), ids=str)
def test_documented_signature_matches_the_code(doc: Documented, target: Callable[..., Any]) -> None:
    assert problems(doc, target) == [], str(doc)


def test_enough_signatures_are_checked() -> None:
    """The pages' signatures resolve: a change to the span pattern or the packages that
    silently checks nothing fails here."""
    names = {doc.name for doc, _ in checked()}
    assert len(names) >= 15, sorted(names)
    assert {"OcrPipeline", "Pipeline", "compile_model", "QuantParameters"} <= names


@pytest.mark.parametrize(
    ("span", "problem"),
    [
        ("`OcrPipeline(generation=None, *, angle=False, runner_type=..., options=None)`",
         "angle=False, but the code's default is True"),
        ("`OcrPipeline(generation=None, angle=True)`", "'angle' is after '*' in the code"),
        ("`OcrPipeline(*, angles=True)`", "no parameter 'angles'"),
        ("`QuantParameters(zero_point=0, scale=1.0)`", "'scale' is out of order"),
        ("`QuantParameters(zero_point: int = 0)`", "required parameter 'scale' is not written"),
        ("`QuantParameters(scale=1.0)`", "'scale' has no default in the code"),
    ],
)  # fmt: skip
def test_a_wrong_signature_is_caught(tmp_path: Path, span: str, problem: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"Intro.\n\n{span} does things.\n")
    (doc,) = documented([page])
    target = resolve(doc.name)
    assert target is not None
    assert any(problem in line for line in problems(doc, target)), problems(doc, target)


def test_calls_and_placeholders_are_not_signatures(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("`compile_model(..., precision=\"bf16\")` and `OcrPipeline(generation=None,"
                    " *, runner_type=..., options=<yours>, read_limit=LIMIT)`\n")  # fmt: skip
    (doc,) = documented([page])
    target = resolve(doc.name)
    assert target is not None and problems(doc, target) == []
