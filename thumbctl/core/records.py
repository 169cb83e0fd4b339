"""Records: dataclasses that cost one small compile per class instead of six.

``dataclasses.dataclass`` compiles every method it writes with an ``exec`` of its own:
six for a frozen class on Python 3.11 (``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__``, ``__delattr__``). thumbctl declares about a hundred
records, and those compiles were the largest single part of every command's start-up
(``docs/architecture.md``, "Start-up and Typer").

:func:`record` keeps the dataclass machinery for what it is good at (collecting the
fields, their defaults and ``field()`` options, inheritance, ``__match_args__``), so
``dataclasses.fields``, ``replace`` and ``asdict`` work unchanged. It compiles only
``__init__``, which must keep its signature; equality, ordering, hashing and ``repr``
are shared functions that read the fields through an ``operator.attrgetter`` made per
class, and a frozen record refuses assignment through two shared functions.
``tests/test_records.py`` holds it to ``dataclass``'s behaviour.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T", bound=type)

_MISSING = dataclasses.MISSING


class _Factory:
    """The default of a parameter whose field has a ``default_factory`` (as ``dataclass`` shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


@overload
def record(cls: T, /) -> T: ...
@overload
def record(*, frozen: bool = True, eq: bool = True, order: bool = False) -> Callable[[T], T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: T | None = None, /, *, frozen: bool = True, eq: bool = True, order: bool = False) -> Any:
    """``@dataclass(frozen=True)`` (or ``frozen=False``), with the same ``eq`` and ``order``."""

    def wrap(cls: T) -> T:
        return _make(cls, frozen=frozen, eq=eq, order=order)

    return wrap if cls is None else wrap(cls)


def _make(cls: T, *, frozen: bool, eq: bool, order: bool) -> T:
    own = dict(cls.__dict__)
    cls.__doc__ = own.get("__doc__") or cls.__name__  # dataclass would write one from inspect.signature
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    cls.__doc__ = own.get("__doc__")
    fields = list(dataclasses.fields(cls))
    if any(f.kw_only for f in fields):
        raise TypeError(f"{cls.__qualname__}: a record has no keyword-only fields")
    methods: dict[str, Any] = {"__init__": _compiled_init(cls, fields, frozen), "__repr__": _repr}
    cls._record_shown = tuple(f.name for f in fields if f.repr)  # type: ignore[attr-defined]
    cls._record_key = staticmethod(_getter([f.name for f in fields if f.compare]))  # type: ignore[attr-defined]
    if eq:
        methods["__eq__"] = _eq
    if order:
        methods.update(__lt__=_lt, __le__=_le, __gt__=_gt, __ge__=_ge)
    if eq and frozen:
        hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
        cls._record_hashed = staticmethod(_getter(hashed))  # type: ignore[attr-defined]
        methods["__hash__"] = _hash
    elif eq:
        methods["__hash__"] = None
    for name, method in methods.items():
        if not _defined_by_class(own, name):
            setattr(cls, name, method)
    if frozen:
        cls.__setattr__ = _refuse_set  # type: ignore[method-assign, assignment]
        cls.__delattr__ = _refuse_delete  # type: ignore[method-assign, assignment]
    return cls


def _defined_by_class(own: dict[str, Any], name: str) -> bool:
    """Whether the class body wrote ``name`` itself; a ``__hash__`` of None is Python's
    doing when the body defines ``__eq__``, not the class's (as ``dataclass`` reads it)."""
    if name == "__hash__":
        return name in own and not (own[name] is None and "__eq__" in own)
    return name in own


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The fields' values as one tuple (``attrgetter`` gives a bare value for one name)."""
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names) if names else (lambda obj: ())


def _compiled_init(cls: type, fields: list[dataclasses.Field[Any]], frozen: bool) -> Callable[..., None]:
    """``__init__`` with the fields as its parameters, in order, with their defaults."""
    names: dict[str, Any] = {"__object_setattr": object.__setattr__, "__FACTORY": _FACTORY}
    params, body = ["self"], []
    for f in fields:
        if f.default is not _MISSING:
            names[f"__default_{f.name}"] = f.default
        if f.default_factory is not _MISSING:
            names[f"__factory_{f.name}"] = f.default_factory
        if f.init:
            params.append(f.name + _param_default(f))
        value = _init_value(f)
        if value is None:
            continue
        body.append(f"  __object_setattr(self, {f.name!r}, {value})" if frozen else f"  self.{f.name} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("  self.__post_init__()")
    namespace: dict[str, Any] = {}
    source = "\n".join([f"def __init__({', '.join(params)}):", *(body or ["  pass"])])
    exec(source, names, namespace)  # noqa: S102 - the source is made of the class's field names only
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**{f.name: f.type for f in fields if f.init}, "return": None}
    return init  # type: ignore[no-any-return]


def _param_default(f: dataclasses.Field[Any]) -> str:
    if f.default is not _MISSING:
        return f"=__default_{f.name}"
    return "=__FACTORY" if f.default_factory is not _MISSING else ""


def _init_value(f: dataclasses.Field[Any]) -> str | None:
    """What ``__init__`` stores in the field, or None when it stores nothing (a field
    outside ``__init__`` with no default is left unset, as ``dataclass`` leaves it)."""
    if f.default_factory is not _MISSING:
        return f"__factory_{f.name}() if {f.name} is __FACTORY else {f.name}" if f.init else f"__factory_{f.name}()"
    if f.init:
        return f.name
    return f"__default_{f.name}" if f.default is not _MISSING else None


def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._record_shown)
    return f"{self.__class__.__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        return self._record_key(self) == self._record_key(other)
    return NotImplemented


def _lt(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        return self._record_key(self) < self._record_key(other)
    return NotImplemented


def _le(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        return self._record_key(self) <= self._record_key(other)
    return NotImplemented


def _gt(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        return self._record_key(self) > self._record_key(other)
    return NotImplemented


def _ge(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        return self._record_key(self) >= self._record_key(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self._record_hashed(self))


def _refuse_set(self: object, name: str, value: object) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delete(self: object, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
