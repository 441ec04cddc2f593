"""Model layer: the compiled-model format, its loader, the compiler and the model zoo.

``compile_model`` / ``compile_to_memory`` turn an ONNX model into a :class:`CompiledModel`
(see :mod:`._compiler` for the options); ``load_model`` reads one back from a ``.rai`` file or
a ``vaiml_par_0`` directory. ``class_names(model, labels_file=None)`` names a model's classes
(the user's file, the model's record, or a zoo model's own): the one rule every app uses.
``task_of(path)`` returns a compiled model's task record (what its outputs mean, its labels
and the preprocessing it was compiled with; see :mod:`._task`): apps read a model's task
from it, never from its name.

The compiler (onnx, onnxruntime's quantization tools: about a second of imports) loads on
first use of ``compile_model`` / ``compile_to_memory``: a process that only loads and runs
compiled models (a Ray worker, an app on a cached model) never imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._artifact import artifact_key
from ._class_names import class_names
from ._compiled import CompiledModel, Intermediate, Partition, TensorSpec
from ._config import ConfigFile, check_compiled_with, read_config
from ._graph import ELEM_OF, graph_inputs, node_attr
from ._input_formats import INPUT_FORMATS
from ._loader import load_model
from ._options import CompileOptions, parse_shape
from ._precision import precision_line, precision_of, run_precision, slower_than_fp32
from ._preprocessing import InputPreprocessing, ResizePolicy, preprocessing_of
from ._task import (
    TASKS,
    TaskRecord,
    read_class_names,
    record_of,
    task_of,
    usual_preprocessing,
)

if TYPE_CHECKING:
    from ._compiler import compile_model, compile_to_memory

_LAZY = frozenset({"compile_model", "compile_to_memory"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import _compiler

        value = getattr(_compiler, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ELEM_OF",
    "INPUT_FORMATS",
    "TASKS",
    "CompileOptions",
    "CompiledModel",
    "ConfigFile",
    "InputPreprocessing",
    "Intermediate",
    "Partition",
    "ResizePolicy",
    "TaskRecord",
    "TensorSpec",
    "artifact_key",
    "check_compiled_with",
    "class_names",
    "compile_model",
    "compile_to_memory",
    "graph_inputs",
    "load_model",
    "node_attr",
    "parse_shape",
    "precision_line",
    "precision_of",
    "preprocessing_of",
    "read_class_names",
    "read_config",
    "record_of",
    "run_precision",
    "slower_than_fp32",
    "task_of",
    "usual_preprocessing",
]
