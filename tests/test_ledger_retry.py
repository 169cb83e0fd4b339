"""The busy/reconnect retry around a ledger's ports (thumbctl/ledger/retry.py): each port offers
the methods of its class, each public call runs through one tenacity policy, once, never nested,
and a method marked direct is not retried."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import pytest

from thumbctl.core.errors import LedgerContention
from thumbctl.core.retries import BusyPolicy
from thumbctl.ledger.core import Ledger, open_backend
from thumbctl.ledger.queue import Queue
from thumbctl.ledger.retry import Retrier, direct, with_retry
from thumbctl.ledger.upkeep import Upkeep

BUSY = BusyPolicy(timeout=0.05, bound=5.0)


class Port:
    """A port whose calls meet a broken deadlock the first ``conflicts`` times."""

    def __init__(self, conflicts: int) -> None:
        self.conflicts = conflicts
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> int:
        self.calls[name] = self.calls.get(name, 0) + 1
        return self.calls[name]

    def step(self) -> str:
        if self._count("step") <= self.conflicts:
            raise LedgerContention("deadlock detected")
        return "done"

    def two_steps(self) -> str:
        self._count("two_steps")
        return self.step()

    @direct
    def as_is(self) -> str:
        return self.step()


@pytest.fixture
def retrier(tmp_path: Path) -> Retrier:
    return Retrier(open_backend(tmp_path / "l.db", clock=time.time, busy=BUSY, read_only=False), BUSY)


def test_a_call_is_run_again_after_a_broken_deadlock(retrier: Retrier) -> None:
    port = Port(conflicts=2)
    assert with_retry(port, retrier).step() == "done"
    assert port.calls == {"step": 3}


def test_a_method_calling_another_is_retried_once_around_the_outer_call(retrier: Retrier) -> None:
    """The inner call is the port's own: the outer call runs again, the inner one has no retry of its own."""
    port = Port(conflicts=1)
    assert with_retry(port, retrier).two_steps() == "done"
    assert port.calls == {"two_steps": 2, "step": 2}


def test_a_direct_method_is_not_retried(retrier: Retrier) -> None:
    port = Port(conflicts=1)
    with pytest.raises(LedgerContention):
        with_retry(port, retrier).as_is()
    assert port.calls == {"step": 1}


def test_the_retry_gives_up_at_the_bound_with_the_last_error(tmp_path: Path) -> None:
    bound = BusyPolicy(timeout=0.05, bound=0.3)
    retrier = Retrier(open_backend(tmp_path / "l.db", clock=time.time, busy=bound, read_only=False), bound)
    started = time.monotonic()
    with pytest.raises(LedgerContention):
        with_retry(Port(conflicts=10**6), retrier).step()
    assert 0.3 <= time.monotonic() - started < 3.0


@pytest.mark.parametrize(("name", "port_class"), [("queue", Queue), ("upkeep", Upkeep)])
def test_a_ledger_port_has_the_public_methods_of_its_class_with_their_signatures(
    tmp_path: Path, name: str, port_class: type
) -> None:
    with Ledger(tmp_path / "l.db") as ledger:
        port = getattr(ledger, name)
        public = {n for n, _ in inspect.getmembers(port_class, inspect.isfunction) if not n.startswith("_")}
        assert {n for n in dir(port) if not n.startswith("_") and callable(getattr(port, n))} >= public
        for method in public:
            unbound = inspect.signature(getattr(port_class, method))
            bound = unbound.replace(parameters=list(unbound.parameters.values())[1:])  # without self
            assert inspect.signature(getattr(port, method)) == bound
        with pytest.raises(AttributeError):
            port.db  # noqa: B018 - the port's own state is not reached through the wrapper
