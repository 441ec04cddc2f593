"""Implementation modules are private (httpx style): a module that is not part of the API is
named ``_*.py`` and reached only through its package's ``__init__`` and ``__all__``.

The public modules are the packages (each exports its API through ``__all__``) and the
applications, which are programs (``python -m copyless.apps.NAME``, console scripts) and
the benchmark suite's modules, which ``copyless-bench`` and its tests address by name. A new
module is private (``_name.py``), or is added here on purpose, with its package's ``__all__``.
"""

from __future__ import annotations

import importlib
import pkgutil

import copyless

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
    "copyless.apps.bench.pipeline",
    "copyless.apps.bench.prefix",
    "copyless.apps.bench.report",
    "copyless.apps.bench.spin",
    "copyless.apps.bench.stages",
    "copyless.apps.bench.suites",
    "copyless.apps.bench.tasks",
    "copyless.apps.bench.timing",
    "copyless.apps.batch",
    "copyless.apps.compile",
    "copyless.apps.detect",
    "copyless.apps.video",
    "copyless.apps.infer_async",
    "copyless.apps.zerocopy",
    "copyless.apps.zoo",
    "copyless.backends",
    "copyless.ipc",
    "copyless.layout",
    "copyless.memory",
    "copyless.model",
    "copyless.model.postprocess",
    "copyless.model.zoo",
    "copyless.ray",
    "copyless.runner",
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
