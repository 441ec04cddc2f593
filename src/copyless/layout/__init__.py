"""Layout layer: the views of a logical tensor and the fused conversions between them.

:func:`convert` (tensors) and :func:`convert_array` (raw arrays) turn one view into another
in a single pass of a C kernel: transpose, cast, (de)quantization and channel padding fused.
:func:`plan_for` gives the cached, reusable :class:`Plan` behind both.
"""

from ._convert import convert, convert_array
from ._plan import ElementRule, Op, Plan, element_rule, plan_for
from ._views import GROUP, Logical, hw_info_for, logical_of

__all__ = [
    "GROUP",
    "ElementRule",
    "Logical",
    "Op",
    "Plan",
    "convert",
    "convert_array",
    "element_rule",
    "hw_info_for",
    "logical_of",
    "plan_for",
]
