"""The removal channel that resumable streams read (no server): exactly once, in order, and `resync`
exactly when something may have been missed, for any window, history and resume position."""

from __future__ import annotations

import pytest
from execpods.core import ExecutorExited, ExecutorRemoval
from execpods.core.removals import InvalidPosition, NumberedRemoval, Position, RemovalChannel
from hypothesis import given
from hypothesis import strategies as st

GONE = ExecutorExited(exit_code=-1, exit_caused_by_app=False, message="gone")


def _remove(log: RemovalChannel, executor_id: int) -> None:
    log.executor_removed(ExecutorRemoval(executor_id=executor_id, reason=GONE))


@given(
    window=st.integers(1, 8),
    before=st.integers(0, 20),
    after=st.integers(0, 10),
    data=st.data(),
)
def test_a_resumed_stream_gets_each_removal_after_its_position_once(
    window: int, before: int, after: int, data: st.DataObject
) -> None:
    log = RemovalChannel(window=window, incarnation="this")
    for executor_id in range(1, before + 1):
        _remove(log, executor_id)
    position = data.draw(st.integers(0, before), label="position")
    received: list[NumberedRemoval] = []
    opened = log.open(Position(incarnation="this", sequence=position), received.append)
    for executor_id in range(before + 1, before + after + 1):
        _remove(log, executor_id)
    opened.cancel()
    _remove(log, 10_000)  # after cancelling: not delivered

    sequences = [r.sequence for r in received]
    assert sequences == sorted(set(sequences))  # in order, each once
    assert all(s > position for s in sequences)
    kept_from = max(1, before - window + 1)
    missed = set(range(position + 1, before + 1)) - set(range(kept_from, before + 1))
    assert opened.resync == bool(missed)
    assert set(sequences) == set(range(position + 1, before + after + 1)) - missed
    assert [r.removal.executor_id for r in received] == sequences  # ids were 1, 2, ... in order


def test_another_incarnation_resyncs_and_gets_all_that_is_kept() -> None:
    log = RemovalChannel(window=2, incarnation="new")
    for executor_id in (1, 2, 3):
        _remove(log, executor_id)
    received: list[NumberedRemoval] = []
    opened = log.open(Position(incarnation="old", sequence=99), received.append)
    assert opened.resync
    assert opened.start == Position(incarnation="new", sequence=0)
    assert [r.sequence for r in received] == [2, 3]


def test_a_new_stream_starts_from_now() -> None:
    log = RemovalChannel(window=5, incarnation="x")
    _remove(log, 1)
    received: list[NumberedRemoval] = []
    opened = log.open(None, received.append)
    assert (opened.start, opened.resync, received) == (
        Position(incarnation="x", sequence=1),
        False,
        [],
    )
    _remove(log, 2)
    assert [r.sequence for r in received] == [2]


def test_a_position_from_the_future_is_refused_and_registers_nothing() -> None:
    log = RemovalChannel(window=5, incarnation="x")
    _remove(log, 1)
    received: list[NumberedRemoval] = []
    with pytest.raises(InvalidPosition, match="never sent"):
        log.open(Position(incarnation="x", sequence=2), received.append)
    _remove(log, 2)
    assert received == []


def test_incarnations_differ_between_processes() -> None:
    assert RemovalChannel(window=1).incarnation != RemovalChannel(window=1).incarnation
