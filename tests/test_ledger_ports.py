"""The ledger's ports are protocols: each documented once, each implemented over SQL with the
same signatures, and a Ledger (a file, a server, or thumbctl.testing.InMemoryLedger) exposes its
ports typed as the protocols."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

from thumbctl.ledger import (
    Intake,
    IntakePort,
    Ledger,
    Queue,
    QueuePort,
    Upkeep,
    UpkeepPort,
    Views,
    ViewsPort,
)
from thumbctl.testing import InMemoryLedger

PORTS = {
    "queue": (QueuePort, Queue),
    "views": (ViewsPort, Views),
    "upkeep": (UpkeepPort, Upkeep),
    "intake": (IntakePort, Intake),
}


def members(port: type) -> list[str]:
    return sorted(name for name, value in vars(port).items() if inspect.isfunction(value) and not name.startswith("_"))


def shape(function: object) -> list[tuple[str, object, object]]:
    """Each parameter's name, kind and annotation (defaults are the implementation's to give)."""
    return [(p.name, p.kind, p.annotation) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize(("port", "implementation"), PORTS.values(), ids=PORTS.keys())
def test_each_port_is_a_protocol_its_sql_implementation_follows(port: type, implementation: type) -> None:
    assert typing.Protocol in port.__mro__ and not issubclass(implementation, typing.Protocol)
    for name in members(port):
        ours, theirs = getattr(implementation, name), getattr(port, name)
        where = f"{implementation.__name__}.{name} differs from {port.__name__}"
        if hasattr(ours, "__wrapped__"):  # a context manager: the protocol names what it yields
            ours = ours.__wrapped__
            assert inspect.signature(theirs).return_annotation.startswith("AbstractContextManager["), where
        else:
            assert inspect.signature(ours).return_annotation == inspect.signature(theirs).return_annotation, where
        assert shape(ours) == shape(theirs), where


@pytest.mark.parametrize(("port", "implementation"), PORTS.values(), ids=PORTS.keys())
def test_each_port_method_is_documented_once_on_the_protocol(port: type, implementation: type) -> None:
    for name in members(port):
        assert getattr(port, name).__doc__, f"{port.__name__}.{name} has no docstring"
        assert getattr(implementation, name).__doc__ is None, f"{implementation.__name__}.{name} repeats its docs"


def test_a_ledger_is_typed_against_the_protocols() -> None:
    hints = typing.get_type_hints(Ledger)
    assert {role: hints[role] for role in PORTS} == {role: port for role, (port, _) in PORTS.items()}


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_each_port_of_an_open_ledger_answers_every_protocol_method(tmp_path: Path, kind: str) -> None:
    with Ledger(tmp_path / "ledger.db") if kind == "file" else InMemoryLedger() as ledger:
        for role, (port, _) in PORTS.items():
            missing = [name for name in members(port) if not callable(getattr(getattr(ledger, role), name, None))]
            assert not missing, f"ledger.{role} lacks {missing}"
