"""``ReadOnly``: a read-only attribute over a private slot, in one line.

For classes whose fields are set once but which are no dataclass, because they own
resources and change state when closed (``NpuTensor``, ``Runner``): ``info =
ReadOnly[NpuTensorInfo]("...")`` reads ``self._info``, and assigning ``tensor.info`` raises
``AttributeError``, as a ``@property`` without setter would (the stack of those it
replaces repeated four lines per attribute).
"""

from __future__ import annotations

from typing import Any, Generic, NoReturn, TypeVar, overload

T = TypeVar("T")


class ReadOnly(Generic[T]):
    """The value of ``obj._<name>`` as ``obj.<name>``; not assignable."""

    def __init__(self, doc: str | None = None) -> None:
        self.__doc__ = doc
        self._slot = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> ReadOnly[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj, self._slot)

    def __set__(self, obj: object, value: T) -> NoReturn:
        raise AttributeError(f"{type(obj).__name__}.{self._slot[1:]} is read-only")
