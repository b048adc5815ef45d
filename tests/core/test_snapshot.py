"""Spark's ExecutorPodsSnapshotSuite (SPARK-24248), and what the persistent map and deltas add."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from execpods.core import (
    EXECUTOR_CONTAINER_NAME,
    ContainerRunning,
    ContainerStatus,
    ContainerTerminated,
    ExecutorPod,
    ExecutorPodsSnapshot,
    ExecutorState,
    ObservedPod,
    PodClassifier,
)
from execpods.core.testing import (
    deleted_executor,
    failed_executor,
    pending_executor,
    running_executor,
    succeeded_executor,
    terminating_executor,
    unknown_executor,
)
from hypothesis import given, settings
from hypothesis import strategies as st


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
        0: ObservedPod(ExecutorState.PENDING, pods[0]),
        1: ObservedPod(ExecutorState.RUNNING, pods[1]),
        2: ObservedPod(ExecutorState.SUCCEEDED, pods[2]),
        3: ObservedPod(ExecutorState.FAILED, pods[3]),
        4: ObservedPod(ExecutorState.DELETED, pods[4]),
        5: ObservedPod(ExecutorState.UNKNOWN, pods[5]),
    }


def test_updates_add_new_pods_for_non_matching_ids_and_edit_existing_pods() -> None:
    original = [pending_executor(0), running_executor(1)]
    snapshot = ExecutorPodsSnapshot.from_pods(original)
    updated = snapshot.with_update(succeeded_executor(1))
    assert updated.as_dict() == {
        0: ObservedPod(ExecutorState.PENDING, original[0]),
        1: ObservedPod(ExecutorState.SUCCEEDED, succeeded_executor(1)),
    }
    with_new = updated.with_update(pending_executor(2))
    assert with_new.as_dict() == {
        0: ObservedPod(ExecutorState.PENDING, original[0]),
        1: ObservedPod(ExecutorState.SUCCEEDED, succeeded_executor(1)),
        2: ObservedPod(ExecutorState.PENDING, pending_executor(2)),
    }
    # The parent is untouched: snapshots are immutable values shared by many readers.
    assert snapshot.as_dict()[1].state is ExecutorState.RUNNING
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
    assert parent.parent_serial is None
    assert child.parent_serial is not None
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


def test_phase_is_case_insensitive_and_deletion_wins_over_a_stopped_phase(
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
        1: ExecutorState.RUNNING,
        2: ExecutorState.FAILED,
        3: ExecutorState.DELETED,
        4: ExecutorState.UNKNOWN,
    }
    assert "unknown phase Evaporated" in caplog.text
    assert [s for s in ExecutorState if s.is_final] == [
        ExecutorState.SUCCEEDED,
        ExecutorState.FAILED,
        ExecutorState.DELETED,
    ]


def _running(executor_id: int, *statuses: ContainerStatus, restart: str = "Never") -> ExecutorPod:
    return replace(
        running_executor(executor_id), container_statuses=statuses, restart_policy=restart
    )


def _exited(name: str, code: int) -> ContainerStatus:
    return ContainerStatus(name=name, state=ContainerTerminated(exit_code=code))


def _alive(name: str) -> ContainerStatus:
    return ContainerStatus(name=name, state=ContainerRunning())


def test_spark_31125_a_running_pod_being_deleted_is_terminating_not_deleted() -> None:
    # The landed code called this pod gone while its executor still ran.
    snapshot = ExecutorPodsSnapshot.from_pods([terminating_executor(1), deleted_executor(2)])
    assert snapshot.executor_pods[1].state is ExecutorState.TERMINATING
    assert not ExecutorState.TERMINATING.is_final
    assert snapshot.executor_pods[2].state is ExecutorState.DELETED
    gone = replace(terminating_executor(3), phase=None)
    assert ExecutorPodsSnapshot.from_pods([gone]).executor_pods[3].state is ExecutorState.DELETED


def test_a_running_pod_whose_executor_container_exited_is_succeeded_or_failed() -> None:
    pods = [
        _running(1, _exited(EXECUTOR_CONTAINER_NAME, 0), _alive("sidecar")),
        _running(2, _exited(EXECUTOR_CONTAINER_NAME, 3), _alive("sidecar")),
        _running(3, _alive(EXECUTOR_CONTAINER_NAME)),
        _running(4, _exited("some-other-container", 0)),
    ]
    states = {i: s.state for i, s in ExecutorPodsSnapshot.from_pods(pods).items()}
    assert states == {
        1: ExecutorState.SUCCEEDED,
        2: ExecutorState.FAILED,
        3: ExecutorState.RUNNING,
        4: ExecutorState.RUNNING,
    }


def test_a_terminating_pod_whose_executor_exited_is_final() -> None:
    pod = replace(
        _running(1, _exited(EXECUTOR_CONTAINER_NAME, 143)),
        deletion_timestamp=terminating_executor(1).deletion_timestamp,
    )
    assert ExecutorPodsSnapshot.from_pods([pod]).executor_pods[1].state is ExecutorState.FAILED


def test_spark_30821_check_all_containers_fails_the_pod_on_any_non_zero_exit() -> None:
    sidecar_crashed = _running(1, _alive(EXECUTOR_CONTAINER_NAME), _exited("sidecar", 1))
    sidecar_done = _running(2, _alive(EXECUTOR_CONTAINER_NAME), _exited("sidecar", 0))
    restarting = _running(
        3, _alive(EXECUTOR_CONTAINER_NAME), _exited("sidecar", 1), restart="OnFailure"
    )
    on = ExecutorPodsSnapshot.from_pods([sidecar_crashed, sidecar_done, restarting])
    assert {i: s.state for i, s in on.items()} == {
        1: ExecutorState.FAILED,
        2: ExecutorState.RUNNING,
        3: ExecutorState.RUNNING,  # the kubelet restarts it: not a failure yet
    }
    off = ExecutorPodsSnapshot.from_pods(
        [sidecar_crashed], classifier=PodClassifier(check_all_containers=False)
    )
    assert off.executor_pods[1].state is ExecutorState.RUNNING


def test_spark_49804_the_executor_container_is_named_by_the_template_setting() -> None:
    pod = _running(1, _exited("main", 1), _alive(EXECUTOR_CONTAINER_NAME), restart="Always")
    named = PodClassifier(executor_container="main")
    observed = ExecutorPodsSnapshot.from_pods([pod], classifier=named).executor_pods[1]
    assert observed.state is ExecutorState.FAILED
    assert observed.exit_code() == 1
    default = ExecutorPodsSnapshot.from_pods([pod]).executor_pods[1]
    assert default.state is ExecutorState.RUNNING
    assert default.exit_code() is None
    updated = ExecutorPodsSnapshot(classifier=named).with_update(pod)
    assert updated.executor_pods[1].state is ExecutorState.FAILED, "updates keep the classifier"


def test_a_pod_the_api_reported_deleted_is_deleted_whatever_its_last_status() -> None:
    # A terminating pod force-deleted: its DELETED event's object still reads Running.
    gone = replace(terminating_executor(1), gone=True)
    assert ExecutorPodsSnapshot().with_update(gone).executor_pods[1].state is ExecutorState.DELETED


_MAKERS = (
    pending_executor,
    running_executor,
    succeeded_executor,
    failed_executor,
    deleted_executor,
    unknown_executor,
    terminating_executor,
)


@settings(max_examples=200, deadline=None)
@given(
    listed=st.dictionaries(st.integers(1, 8), st.integers(0, len(_MAKERS) - 1), max_size=8),
    updates=st.lists(st.tuples(st.integers(1, 8), st.integers(0, len(_MAKERS) - 1)), max_size=30),
)
def test_counts_per_state_follow_every_update(
    listed: dict[int, int], updates: list[tuple[int, int]]
) -> None:
    """Issue 12 (load): `count` is kept by each update instead of walking every executor, and
    always says what a walk would."""
    snapshot = ExecutorPodsSnapshot.from_pods(_MAKERS[m](i) for i, m in listed.items())
    chain = [snapshot]
    for executor_id, maker in updates:
        chain.append(chain[-1].with_update(_MAKERS[maker](executor_id)))
    for each in chain:
        for state in ExecutorState:
            walked = sum(1 for observed in each.executor_pods.values() if observed.state is state)
            assert each.count(state) == walked
        rebuilt = ExecutorPodsSnapshot(executor_pods=each.executor_pods)
        assert rebuilt.count(ExecutorState.RUNNING) == each.count(ExecutorState.RUNNING)
