"""Model layer: the compiled-model format, its loader, the compiler and the model zoo.

``compile_model`` / ``compile_to_memory`` turn an ONNX model into a :class:`CompiledModel`
(see :mod:`.compiler` for the options); ``load_model`` reads one back from a ``.rai`` file or
a ``vaiml_par_0`` directory.
"""

from ._compiled import CompiledModel, Intermediate, Partition, TensorSpec
from ._compiler import artifact_key, compile_model, compile_to_memory
from ._loader import load_model
from ._options import CompileOptions

__all__ = [
    "CompileOptions",
    "CompiledModel",
    "Intermediate",
    "Partition",
    "TensorSpec",
    "artifact_key",
    "compile_model",
    "compile_to_memory",
    "load_model",
]
