"""Layout layer: the views of a logical tensor and the fused conversions between them."""

from .views import GROUP, Logical, hw_info_for, logical_of

__all__ = ["GROUP", "Logical", "hw_info_for", "logical_of"]
