"""copyless-bench: the peer benchmark (plain onnxruntime, ORT IOBinding, OpenVINO, copyless).

``python -m copyless.apps.bench`` or ``copyless-bench``; see :mod:`.cli`. Modules:
:mod:`.models` (model variants, compiled and cached), :mod:`.tasks` (pre/postprocessing),
:mod:`.peers` and :mod:`.contenders` (the pipelines), :mod:`.gate` (correctness),
:mod:`.measure` (interleaved timing), :mod:`.report` (table, JSON, PNG).
"""

from __future__ import annotations

from .cli import main

__all__ = ["main"]
