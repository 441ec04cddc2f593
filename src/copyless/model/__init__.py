"""Model layer: the compiled-model format, its loader, the compiler and the model zoo."""

from .compiled import CompiledModel, Intermediate, Partition, TensorSpec

__all__ = ["CompiledModel", "Intermediate", "Partition", "TensorSpec"]
