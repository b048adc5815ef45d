"""The in-memory id ledger keeps the `ExecutorIdLedger` contract, as the adapter's does."""

from __future__ import annotations

import pytest
from execpods.core.errors import PodOperationError
from execpods.core.ports import ExecutorIdLedger
from execpods.core.testing import InMemoryIdLedger


def test_the_mark_only_rises() -> None:
    ledger: ExecutorIdLedger = InMemoryIdLedger()
    assert ledger.highest_reserved() == 0
    ledger.reserve_through(40)
    ledger.reserve_through(20)
    assert ledger.highest_reserved() == 40


def test_a_refused_write_raises_and_keeps_the_mark() -> None:
    ledger = InMemoryIdLedger(highest=7)
    ledger.fail_writes = True
    with pytest.raises(PodOperationError):
        ledger.reserve_through(50)
    assert ledger.highest_reserved() == 7
