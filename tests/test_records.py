"""thumbctl.core.records: a record behaves as the dataclass it stands for.

Every class shape is declared twice, once with ``dataclasses.dataclass`` and once with
``record``, and the two are held to the same answers: the ``__init__`` signature, what an
instance holds, ``repr``, equality, hashing, ordering, refusal of assignment, ``replace``,
``asdict``, pickling and pattern matching.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thumbctl.core.records import record

# A field: (has a default, default is a factory, in __init__, in repr, compared, hashed)
FieldSpec = tuple[bool, bool, bool, bool, bool, bool | None]

flag = st.booleans()
field_specs = st.tuples(flag, flag, flag, flag, flag, st.none() | flag)


def declare(specs: list[FieldSpec], decorator: Any, name: str = "Shape") -> type:
    """A class with one field per spec; fields without a default come first, as Python requires."""
    annotations: dict[str, Any] = {}
    body: dict[str, Any] = {"__doc__": "A shape."}
    ordered = sorted(enumerate(specs), key=lambda pair: pair[1][0] or not pair[1][2])
    for index, (has_default, factory, init, shown, compared, hashed) in ordered:
        name_of = f"f{index}"
        annotations[name_of] = Any
        options: dict[str, Any] = {"init": init, "repr": shown, "compare": compared, "hash": hashed}
        if has_default or not init:
            if factory:
                options["default_factory"] = lambda index=index: (index,)
            else:
                options["default"] = index * 10
        body[name_of] = field(**options)
    body["__annotations__"] = annotations
    return decorator(type(name, (), body))


def values_for(cls: type, seed: int) -> dict[str, Any]:
    return {f.name: (seed, f.name) for f in dataclasses.fields(cls) if f.init}


@given(st.lists(field_specs, max_size=6), st.integers(0, 3), st.integers(0, 3))
def test_a_frozen_record_answers_as_a_frozen_dataclass(specs: list[FieldSpec], seed: int, other_seed: int) -> None:
    plain = declare(specs, dataclass(frozen=True))
    made = declare(specs, record)
    assert str(inspect.signature(made.__init__)) == str(inspect.signature(plain.__init__))
    a_plain, b_plain = plain(**values_for(plain, seed)), plain(**values_for(plain, other_seed))
    a_made, b_made = made(**values_for(made, seed)), made(**values_for(made, other_seed))
    assert repr(a_made) == repr(a_plain)
    assert dataclasses.asdict(a_made) == dataclasses.asdict(a_plain)
    assert (a_made == b_made) == (a_plain == b_plain)
    assert (a_made != b_made) == (a_plain != b_plain)
    assert a_made == made(**values_for(made, seed))
    assert hash(a_made) == hash(made(**values_for(made, seed)))
    assert [f.name for f in dataclasses.fields(made)] == [f.name for f in dataclasses.fields(plain)]
    assert made.__match_args__ == plain.__match_args__
    for f in dataclasses.fields(made):
        with pytest.raises(FrozenInstanceError):
            setattr(a_made, f.name, 1)
        with pytest.raises(FrozenInstanceError):
            delattr(a_made, f.name)


@given(st.lists(field_specs, min_size=1, max_size=5), st.integers(0, 3), st.integers(0, 3))
def test_a_mutable_record_answers_as_a_dataclass(specs: list[FieldSpec], seed: int, other_seed: int) -> None:
    plain = declare(specs, dataclass)
    made = declare(specs, record(frozen=False))
    a_plain, b_plain = plain(**values_for(plain, seed)), plain(**values_for(plain, other_seed))
    a_made, b_made = made(**values_for(made, seed)), made(**values_for(made, other_seed))
    assert repr(a_made) == repr(a_plain)
    assert (a_made == b_made) == (a_plain == b_plain)
    assert made.__hash__ is None and plain.__hash__ is None
    first = dataclasses.fields(made)[0].name
    setattr(a_made, first, "changed")
    setattr(a_plain, first, "changed")
    assert repr(a_made) == repr(a_plain)


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=2, max_size=6))
def test_an_ordered_record_sorts_as_an_ordered_dataclass(pairs: list[tuple[int, int]]) -> None:
    @dataclass(frozen=True, order=True)
    class Plain:
        a: int
        b: int

    @record(order=True)
    class Made:
        a: int
        b: int

    made_order = [(m.a, m.b) for m in sorted(Made(*p) for p in pairs)]
    assert made_order == [(m.a, m.b) for m in sorted(Plain(*p) for p in pairs)]
    first, second = Made(*pairs[0]), Made(*pairs[1])
    assert (first < second, first <= second, first > second, first >= second) == (
        Plain(*pairs[0]) < Plain(*pairs[1]),
        Plain(*pairs[0]) <= Plain(*pairs[1]),
        Plain(*pairs[0]) > Plain(*pairs[1]),
        Plain(*pairs[0]) >= Plain(*pairs[1]),
    )


def test_a_default_factory_makes_a_fresh_value_per_instance() -> None:
    @record
    class Box:
        items: list[int] = field(default_factory=list)

    first, second = Box(), Box()
    first.items.append(1)
    assert second.items == []
    assert Box([5]).items == [5]


def test_post_init_runs_after_the_fields_are_set() -> None:
    seen = []

    @record
    class Checked:
        size: int

        def __post_init__(self) -> None:
            seen.append(self.size)
            if self.size < 0:
                raise ValueError("negative")

    Checked(3)
    with pytest.raises(ValueError, match="negative"):
        Checked(-1)
    assert seen == [3, -1]


def test_a_subclass_record_extends_its_base_fields_in_order() -> None:
    @record
    class Base:
        root: str
        size: int = 0

    @record
    class Child(Base):
        extra: str = "x"

    child = Child("r", 2, "y")
    assert (child.root, child.size, child.extra) == ("r", 2, "y")
    assert repr(child).endswith(".<locals>.Child(root='r', size=2, extra='y')")
    assert child != Base("r", 2)
    assert dataclasses.replace(child, size=5) == Child("r", 5, "y")


def test_methods_the_class_writes_itself_are_kept() -> None:
    @record
    class Own:
        value: int

        def __repr__(self) -> str:
            return "mine"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Own)

    assert repr(Own(1)) == "mine"
    assert Own(1) == Own(2)
    assert hash(Own(1)) == hash(Own(1))


def test_eq_false_keeps_identity_equality_and_hashing() -> None:
    @record(eq=False)
    class Handle:
        name: str

    one = Handle("a")
    assert one != Handle("a")
    assert {one: 1}[one] == 1


def test_an_unsupported_shape_is_refused_at_declaration() -> None:
    with pytest.raises(TypeError, match="keyword-only"):

        @record
        class Keywords:
            a: int = field(kw_only=True)

    with pytest.raises(ValueError, match="mutable default"):

        @record
        class Shared:
            items: list[int] = []  # noqa: RUF012 - the mistake dataclass refuses, refused here too


@record
class Pickled:
    name: str
    tags: tuple[str, ...] = field(default_factory=tuple)


def test_a_record_survives_pickling_as_a_worker_receives_it() -> None:
    sent = Pickled("a", ("x",))
    received = pickle.loads(pickle.dumps(sent))
    assert received == sent and received is not sent
    assert hash(received) == hash(sent)
    with pytest.raises(FrozenInstanceError):
        received.name = "b"  # type: ignore[misc]


def test_pattern_matching_reads_the_fields_positionally() -> None:
    @record
    class Point:
        x: int
        y: int

    match Point(1, 2):
        case Point(a, b):
            assert (a, b) == (1, 2)
        case _:
            pytest.fail("the record did not match its own class pattern")
