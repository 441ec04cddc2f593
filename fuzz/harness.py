"""What the fuzz harnesses share: Python coverage of copyless's own modules, and the main()."""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import numpy as np


def instrument(modules: Iterable[ModuleType], *extra: Callable[..., Any]) -> None:
    """Give libFuzzer the edges of every function defined in ``modules`` (and ``extra``).

    atheris swaps each function's code object in place, so references held elsewhere
    (lru_cache wrappers, bound methods made later) run the instrumented code too.
    """
    import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]

    seen: set[int] = set()

    def visit(obj: Any, module: str) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if inspect.isfunction(obj) and obj.__module__ == module:
            atheris.instrument_func(obj)
        elif inspect.isclass(obj) and obj.__module__ == module:
            for member in vars(obj).values():
                target = getattr(member, "fget", None) or getattr(member, "__func__", member)
                visit(getattr(target, "__wrapped__", target), module)

    for module in modules:
        for value in vars(module).values():
            visit(getattr(value, "__wrapped__", value), module.__name__)
    for func in extra:
        atheris.instrument_func(func)


def main(check: Callable[[bytes], None], modules: Iterable[ModuleType],
         *extra: Callable[..., Any]) -> None:  # fmt: skip
    """Run ``check`` under libFuzzer with the command line's options."""
    import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]

    logging.disable(logging.CRITICAL)
    np.seterr(all="ignore")
    instrument(modules, *extra)
    if not any(arg.startswith("-max_len=") for arg in sys.argv):
        sys.argv.append("-max_len=512")
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()
