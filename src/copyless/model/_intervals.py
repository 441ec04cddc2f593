"""Intervals and abstract tensors: the values :mod:`._capacity` computes with.

An :data:`Interval` ``(lo, hi)`` bounds one integer; ``None`` is an open side (``lo=None``:
no lower bound, ``hi=None``: no upper bound). A dim is an interval with ``lo >= 0``.
An :class:`Abstract` tensor has a shape of dim intervals (``None``: rank unknown) and, for
small integer tensors (shapes, sizes, axes, counts), the interval of every element in C
order. A :class:`Sequence` is a list of abstract tensors when its structure is known, else
a count interval and one abstract tensor bounding every element.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Interval = tuple[int | None, int | None]
Dims = tuple[Interval, ...]

UNKNOWN_DIM: Interval = (0, None)

#: Integer tensors with at most this many elements have their values tracked.
MAX_VALUES = 64


def exact(value: int) -> Interval:
    return (value, value)


def is_exact(iv: Interval) -> bool:
    return iv[0] is not None and iv[0] == iv[1]


def dim(iv: Interval) -> Interval:
    """An interval as a dim: clipped at 0."""
    lo, hi = iv
    return (max(lo or 0, 0), None if hi is None else max(hi, 0))


def add(a: Interval, b: Interval) -> Interval:
    return (_opt(a[0], b[0], int.__add__, True), _opt(a[1], b[1], int.__add__, True))


def neg(a: Interval) -> Interval:
    return (None if a[1] is None else -a[1], None if a[0] is None else -a[0])


def sub(a: Interval, b: Interval) -> Interval:
    return add(a, neg(b))


def mul(a: Interval, b: Interval) -> Interval:
    """Product; exact where both sides are bounded, else open on the unbounded sides
    (dims only: both non-negative)."""
    if None in a or None in b:
        if a[0] is not None and b[0] is not None and a[0] >= 0 and b[0] >= 0:
            return (a[0] * b[0], _opt(a[1], b[1], int.__mul__, True))
        return (None, None)
    corners = [x * y for x in a for y in b]  # type: ignore[operator]
    return (min(corners), max(corners))


def floordiv(a: Interval, b: Interval, trunc: bool = False) -> Interval:
    """``a / b`` rounded down (or toward zero), for a divisor interval of one sign."""
    if None in a or None in b or b[0] is None or b[1] is None or b[0] <= 0 <= b[1]:
        return (None, None)
    div: Callable[[int, int], int] = (lambda x, y: int(x / y)) if trunc else int.__floordiv__
    corners = [div(x, y) for x in a for y in b]  # type: ignore[arg-type]
    return (min(corners), max(corners))


def ceildiv(a: Interval, b: Interval) -> Interval:
    return neg(floordiv(neg(a), b))


def lower(a: Interval, b: Interval) -> Interval:
    """The interval of ``min(x, y)``."""
    return (_opt(a[0], b[0], min, True), _opt(a[1], b[1], min, False))


def upper(a: Interval, b: Interval) -> Interval:
    """The interval of ``max(x, y)``."""
    return (_opt(a[0], b[0], max, False), _opt(a[1], b[1], max, True))


def join(a: Interval, b: Interval) -> Interval:
    """An interval holding both."""
    return (_opt(a[0], b[0], min, True), _opt(a[1], b[1], max, True))


def _opt(
    x: int | None, y: int | None, op: Callable[[int, int], int], none_wins: bool
) -> int | None:
    """``op(x, y)``; with an open side (None): None if ``none_wins``, else the other."""
    if x is None or y is None:
        return None if none_wins else (y if x is None else x)
    return op(x, y)


def product(dims: Sequence[Interval]) -> Interval:
    total: Interval = (1, 1)
    for d in dims:
        total = mul(total, d)
    return total


@dataclass(frozen=True, slots=True)
class Abstract:
    """What is known of one tensor: dims (None: rank unknown) and small integer values."""

    dims: Dims | None
    values: tuple[Interval, ...] | None = None

    @property
    def rank(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    def exact_values(self) -> tuple[int, ...] | None:
        """The element values when every one is known exactly."""
        if self.values is None or not all(is_exact(v) for v in self.values):
            return None
        return tuple(int(v[0]) for v in self.values)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class SequenceValue:
    """A sequence of tensors: the items when known, else a count and a bound of each."""

    items: tuple[Abstract, ...] | None
    count: Interval
    element: Abstract | None


UNKNOWN = Abstract(None)


def known_dims(dims: Sequence[int]) -> Abstract:
    return Abstract(tuple(exact(int(d)) for d in dims))


def with_values(values: Sequence[int]) -> Abstract:
    """A 1-D integer tensor of exactly these values."""
    return Abstract((exact(len(values)),), tuple(exact(int(v)) for v in values))


def scalar(iv: Interval) -> Abstract:
    return Abstract((), (iv,))


def join_abstract(a: Abstract | None, b: Abstract | None) -> Abstract:
    """A bound of either tensor (the union of what both can be)."""
    if a is None or b is None or a.dims is None or b.dims is None or a.rank != b.rank:
        return UNKNOWN
    dims = tuple(join(x, y) for x, y in zip(a.dims, b.dims, strict=True))
    values = None
    if a.values is not None and b.values is not None and len(a.values) == len(b.values):
        values = tuple(join(x, y) for x, y in zip(a.values, b.values, strict=True))
    return Abstract(dims, values)


def small_enough(dims: Dims) -> bool:
    """True for a static shape of at most MAX_VALUES elements."""
    if not all(is_exact(d) for d in dims):
        return False
    return math.prod(d[0] or 0 for d in dims) <= MAX_VALUES
