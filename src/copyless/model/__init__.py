"""Model layer: the compiled-model format, its loader, the compiler and the model zoo.

``compile_model`` / ``compile_to_memory`` turn an ONNX model into a :class:`CompiledModel`
(see :mod:`._compiler` for the options); ``load_model`` reads one back from a ``.rai`` file or
a ``vaiml_par_0`` directory.
"""

from ._compiled import CompiledModel, Intermediate, Partition, TensorSpec
from ._compiler import artifact_key, compile_model, compile_to_memory
from ._config import ConfigFile, check_compiled_with, read_config
from ._directory import write_atomically
from ._graph import ELEM_OF, graph_inputs
from ._input_formats import INPUT_FORMATS
from ._loader import load_model
from ._options import CompileOptions, parse_shape
from ._preprocessing import InputPreprocessing, ResizePolicy, preprocessing_of

__all__ = [
    "ELEM_OF",
    "INPUT_FORMATS",
    "CompileOptions",
    "CompiledModel",
    "ConfigFile",
    "InputPreprocessing",
    "Intermediate",
    "Partition",
    "ResizePolicy",
    "TensorSpec",
    "artifact_key",
    "check_compiled_with",
    "compile_model",
    "compile_to_memory",
    "graph_inputs",
    "load_model",
    "parse_shape",
    "preprocessing_of",
    "read_config",
    "write_atomically",
]
