"""Spark's ExecutorPodsSnapshotSuite (SPARK-24248), and what the persistent map and deltas add."""

from __future__ import annotations

import logging

import pytest
from execpods.core import ExecutorPod, ExecutorPodsSnapshot, ExecutorPodState, PodState
from execpods.core.testing import (
    deleted_executor,
    failed_executor,
    pending_executor,
    running_executor,
    succeeded_executor,
    unknown_executor,
)


def test_states_are_interpreted_correctly_from_pod_metadata() -> None:
    pods = [
        pending_executor(0),
        running_executor(1),
        succeeded_executor(2),
        failed_executor(3),
        deleted_executor(4),
        unknown_executor(5),
    ]
    snapshot = ExecutorPodsSnapshot.from_pods(pods)
    assert snapshot.as_dict() == {
        0: ExecutorPodState(PodState.PENDING, pods[0]),
        1: ExecutorPodState(PodState.RUNNING, pods[1]),
        2: ExecutorPodState(PodState.SUCCEEDED, pods[2]),
        3: ExecutorPodState(PodState.FAILED, pods[3]),
        4: ExecutorPodState(PodState.DELETED, pods[4]),
        5: ExecutorPodState(PodState.UNKNOWN, pods[5]),
    }


def test_updates_add_new_pods_for_non_matching_ids_and_edit_existing_pods() -> None:
    original = [pending_executor(0), running_executor(1)]
    snapshot = ExecutorPodsSnapshot.from_pods(original)
    updated = snapshot.with_update(succeeded_executor(1))
    assert updated.as_dict() == {
        0: ExecutorPodState(PodState.PENDING, original[0]),
        1: ExecutorPodState(PodState.SUCCEEDED, succeeded_executor(1)),
    }
    with_new = updated.with_update(pending_executor(2))
    assert with_new.as_dict() == {
        0: ExecutorPodState(PodState.PENDING, original[0]),
        1: ExecutorPodState(PodState.SUCCEEDED, succeeded_executor(1)),
        2: ExecutorPodState(PodState.PENDING, pending_executor(2)),
    }
    # The parent is untouched: snapshots are immutable values shared by many readers.
    assert snapshot.as_dict()[1].state is PodState.RUNNING
    assert 2 not in updated


def test_snapshots_compare_by_value_not_by_history() -> None:
    direct = ExecutorPodsSnapshot.from_pods([running_executor(1), running_executor(2)])
    built = ExecutorPodsSnapshot.from_pods([running_executor(1)]).with_update(running_executor(2))
    assert direct == built
    assert direct != built.with_update(failed_executor(2))
    assert ExecutorPodsSnapshot.from_pods([], full_snapshot_ts=5.0) != ExecutorPodsSnapshot()


def test_a_delta_knows_what_changed_only_relative_to_its_parent() -> None:
    parent = ExecutorPodsSnapshot.from_pods([running_executor(1)])
    child = parent.with_update(failed_executor(1))
    grandchild = child.with_update(pending_executor(7))
    assert parent.is_full
    assert not child.is_full
    assert child.changes_since(parent) == frozenset({1})
    assert grandchild.changes_since(child) == frozenset({7})
    assert grandchild.changes_since(parent) is None
    assert child.changes_since(None) is None


@pytest.mark.parametrize("bad", [None, "", "abc", "-3", "1.5", " 7", "٣"])
def test_pods_without_a_valid_executor_id_are_skipped_with_a_warning(
    bad: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    labels = {} if bad is None else {"spark-exec-id": bad}
    stray = ExecutorPod(name="stray", labels=labels, phase="Running")
    caplog.set_level(logging.WARNING)
    snapshot = ExecutorPodsSnapshot.from_pods([stray, running_executor(1)])
    assert list(snapshot) == [1]
    assert snapshot.with_update(stray) is snapshot
    assert "Skipping pod stray" in caplog.text


def test_phase_is_case_insensitive_and_deletion_wins_over_phase(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pods = [
        ExecutorPod(name="a", labels={"spark-exec-id": "1"}, phase="RUNNING"),
        ExecutorPod(name="b", labels={"spark-exec-id": "2"}, phase="Failed"),
        deleted_executor(3),
        ExecutorPod(name="d", labels={"spark-exec-id": "4"}, phase="Evaporated"),
    ]
    caplog.set_level(logging.WARNING)
    states = {i: s.state for i, s in ExecutorPodsSnapshot.from_pods(pods).items()}
    assert states == {
        1: PodState.RUNNING,
        2: PodState.FAILED,
        3: PodState.DELETED,
        4: PodState.UNKNOWN,
    }
    assert "unknown phase Evaporated" in caplog.text
    assert [s for s in PodState if s.is_final] == [
        PodState.SUCCEEDED,
        PodState.FAILED,
        PodState.DELETED,
    ]
