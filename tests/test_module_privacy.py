"""Implementation modules are private (httpx style): a module that is not part of the API is
named ``_*.py`` and reached only through its package's ``__init__`` and ``__all__``.

The modules below predate the rule and keep their names for now (renaming them while the
parallel branches edit them would break every merge); the list may only shrink. A new module
is private (``_name.py``), or is added here on purpose, with its package's ``__all__``.
"""

from __future__ import annotations

import importlib
import pkgutil

import copyless

GRANDFATHERED = {
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
    "copyless.backends.base",
    "copyless.backends.cuda",
    "copyless.backends.cuda_options",
    "copyless.backends.onnxruntime",
    "copyless.backends.openvino",
    "copyless.ipc",
    "copyless.ipc.control",
    "copyless.ipc.errors",
    "copyless.ipc.pipeline",
    "copyless.ipc.pool",
    "copyless.ipc.producer",
    "copyless.ipc.transport",
    "copyless.ipc.wire",
    "copyless.layout",
    "copyless.layout.convert",
    "copyless.layout.nest",
    "copyless.layout.plan",
    "copyless.layout.views",
    "copyless.memory",
    "copyless.memory.device",
    "copyless.memory.dlpack",
    "copyless.memory.host",
    "copyless.memory.tensor",
    "copyless.model",
    "copyless.model.archive",
    "copyless.model.capacity",
    "copyless.model.compiled",
    "copyless.model.compiler",
    "copyless.model.directory",
    "copyless.model.folding",
    "copyless.model.graph",
    "copyless.model.input_formats",
    "copyless.model.loader",
    "copyless.model.manifest",
    "copyless.model.options",
    "copyless.model.partition",
    "copyless.model.pixels",
    "copyless.model.postprocess",
    "copyless.model.postprocess.centerface",
    "copyless.model.postprocess.fold",
    "copyless.model.postprocess.nms",
    "copyless.model.postprocess.ops",
    "copyless.model.postprocess.picodet",
    "copyless.model.postprocess.spec",
    "copyless.model.preprocessing",
    "copyless.model.quantize",
    "copyless.model.shapes",
    "copyless.model.stem",
    "copyless.model.yuv",
    "copyless.model.zoo",
    "copyless.model.zoo.cache",
    "copyless.model.zoo.catalog",
    "copyless.model.zoo.centerface",
    "copyless.model.zoo.checkpoint",
    "copyless.model.zoo.efficientnet",
    "copyless.model.zoo.graph",
    "copyless.model.zoo.labels",
    "copyless.model.zoo.photos",
    "copyless.model.zoo.picodet",
    "copyless.model.zoo.ppocr",
    "copyless.model.zoo.resnet",
    "copyless.model.zoo.shipped",
    "copyless.model.zoo.sources",
    "copyless.ray",
    "copyless.runner",
    "copyless.runner.device_api",
    "copyless.runner.factory",
    "copyless.runner.options",
    "copyless.runner.plan",
    "copyless.runner.replay",
    "copyless.runner.runner",
    "copyless.runner.slot",
    "copyless.types",
    "copyless.types.enums",
    "copyless.types.errors",
    "copyless.types.info",
    "copyless.types.serialize",
    "copyless.vision",
    "copyless.vision.decode",
    "copyless.vision.detections",
    "copyless.vision.formats",
    "copyless.vision.gpu",
    "copyless.vision.postprocess",
    "copyless.vision.preprocess",
    "copyless.vision.video_writer",
    "copyless.vision.video",
}


def _public_modules() -> set[str]:
    return {
        module.name
        for module in pkgutil.walk_packages(copyless.__path__, "copyless.")
        if not any(part.startswith("_") for part in module.name.split(".")[1:])
    }


def test_no_new_public_module() -> None:
    new = sorted(_public_modules() - GRANDFATHERED)
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
