"""A full list older than the watch's updates loses none of them (core `freshness`).

The poll's list is answered as of the moment the API server read it; the watch, on its own
thread, may apply newer events before the list reaches the store. Applied whole, the list hid the
pods created meanwhile and the allocator created them again (68 pods for a target of 60 in
tests/sidecar/test_slow_stream.py). With the mark the poll takes before it lists, the store keeps
the watch's state of every executor written after the mark and takes the rest from the list.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from execpods.core import (
    DeterministicScheduler,
    ExecutorPod,
    ExecutorPodsSnapshot,
    ExecutorState,
    ManualClock,
)
from execpods.core.freshness import WriteLog
from execpods.core.ports import SnapshotsStore
from execpods.core.store import ScheduledSnapshotsStore
from execpods.core.testing import (
    DeterministicSnapshotsStore,
    deleted_executor,
    pending_executor,
    running_executor,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.core.allocator_support import created, pod, spark_rig


def scheduled_store() -> ScheduledSnapshotsStore:
    scheduler = DeterministicScheduler(ManualClock())
    return ScheduledSnapshotsStore(scheduler, clock=scheduler.clock)


STORES: dict[str, Callable[[], SnapshotsStore]] = {
    "scheduled": scheduled_store,
    "deterministic": DeterministicSnapshotsStore,
}


def states(store: SnapshotsStore) -> dict[int, ExecutorState]:
    return {i: observed.state for i, observed in store.current_snapshot.items()}


# --- the allocator: the bug as it happened ------------------------------------------------------


def test_a_list_older_than_the_watch_does_not_make_the_allocator_create_again() -> None:
    rig = spark_rig()
    mark = rig.store.begin_list()  # the poll asks for a list: the server has no pods yet
    rig.allocator.set_total_expected_executors(3)
    assert created(rig) == [1, 2, 3]
    for i in (1, 2, 3):  # the watch's ADDED events, applied while the list is in flight
        rig.store.update_pod(pod(rig, i, "pending"))
    rig.store.replace_snapshot([], since=mark)  # the list, read before the creates
    rig.store.notify_subscribers()
    assert sorted(rig.store.current_snapshot) == [1, 2, 3]
    assert created(rig) == [1, 2, 3], "no executor created twice over"


def test_a_list_without_a_mark_still_replaces_everything() -> None:
    """The watch's own list (it lists and updates in turn) keeps Spark's replace semantics."""
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(2)
    for i in created(rig):
        rig.store.update_pod(pod(rig, i, "running"))
    rig.store.replace_snapshot([pod(rig, 2, "running")])
    assert sorted(rig.store.current_snapshot) == [2]


# --- the store: what a list applied with a mark keeps -------------------------------------------


@pytest.mark.parametrize("make", STORES.values(), ids=STORES.keys())
def test_updates_after_the_mark_win_and_the_list_gives_the_rest(
    make: Callable[[], SnapshotsStore],
) -> None:
    store = make()
    store.replace_snapshot([pending_executor(1), pending_executor(2), running_executor(3)])
    store.update_pod(running_executor(1))  # before the mark: the list is at least this new
    mark = store.begin_list()
    store.update_pod(running_executor(4))  # added after the list was read
    store.update_pod(deleted_executor(3))  # deleted after the list was read
    store.replace_snapshot(
        [running_executor(1), running_executor(2), running_executor(3), pending_executor(5)],
        since=mark,
    )
    assert states(store) == {
        1: ExecutorState.RUNNING,
        2: ExecutorState.RUNNING,  # the list is newer for pods the watch left alone
        3: ExecutorState.DELETED,  # the watch's deletion stays
        4: ExecutorState.RUNNING,  # the watch's add stays
        5: ExecutorState.PENDING,  # the watch's event for it is still on its way
    }
    assert store.current_snapshot.changes_since(None) is None, "a full snapshot"


@pytest.mark.parametrize("make", STORES.values(), ids=STORES.keys())
def test_a_list_overtaken_by_another_full_list_is_dropped(
    make: Callable[[], SnapshotsStore],
) -> None:
    store = make()
    mark = store.begin_list()
    store.replace_snapshot([running_executor(1), running_executor(2)])  # the watch re-listed
    store.update_pod(running_executor(3))
    store.replace_snapshot([pending_executor(1)], since=mark)
    assert states(store) == dict.fromkeys((1, 2, 3), ExecutorState.RUNNING)
    mark = store.begin_list()  # the next poll applies as usual
    store.replace_snapshot([running_executor(2)], since=mark)
    assert states(store) == {2: ExecutorState.RUNNING}


@pytest.mark.parametrize("make", STORES.values(), ids=STORES.keys())
def test_a_mark_only_keeps_what_was_written_after_it(
    make: Callable[[], SnapshotsStore],
) -> None:
    store = make()
    store.update_pod(running_executor(1))
    store.update_pod(running_executor(2))
    mark = store.begin_list()
    store.replace_snapshot([running_executor(2)], since=mark)
    assert states(store) == {2: ExecutorState.RUNNING}, "1 was deleted before the list was read"


def test_the_log_holds_executors_only_while_a_list_is_out() -> None:
    log = WriteLog()
    empty = ExecutorPodsSnapshot()
    for i in range(1000):
        log.updated([i % 100])
    assert len(log) == 0, "no list is out: nothing to keep"
    mark = log.mark()
    for i in range(1000):
        log.updated([i % 100])
    assert len(log) == 100, "one entry per executor"
    log.full_list(empty, empty, mark)
    log.updated([1])
    assert len(log) == 0


# --- every interleaving: a cluster, its watch, a poll in three steps, the allocator -------------


@dataclass
class Race:
    """A cluster whose events reach the store late, beside a poll that lists between them.

    The cluster's pods only start (Pending, then Running) and are never deleted, so every pod
    the allocator made counts toward its target for good: it must never make more than that.
    """

    target: int
    cluster: dict[int, str] = field(default_factory=dict)
    """Executor id -> its phase on the server."""
    events: list[tuple[int, str]] = field(default_factory=list)
    """Watch events made on the server and not yet applied, oldest first."""
    applied_after_mark: dict[int, str] = field(default_factory=dict)
    """The phase the watch last applied for each executor since the in-flight poll's mark."""

    def pod(self, executor_id: int, phase: str) -> ExecutorPod:
        make = pending_executor if phase == "pending" else running_executor
        return make(executor_id)


STEPS = st.lists(
    st.sampled_from(
        ["ask", "round", "deliver", "flush", "start", "mark", "read", "apply", "relist"]
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(target=st.integers(1, 8), steps=STEPS, starts=st.randoms(use_true_random=False))
@example(  # the race of tests/sidecar/test_slow_stream.py, in its shortest form
    target=1, steps=["mark", "read", "ask", "deliver", "apply", "round"], starts=random.Random(0)
)
def test_no_interleaving_of_a_list_and_the_watch_loses_a_pod_or_over_allocates(
    target: int, steps: list[str], starts: random.Random
) -> None:
    rig = spark_rig()
    race = Race(target=target)
    poll: str | None = None  # None, "marked" or "read"
    mark = rig.store.begin_list()
    listed: list[ExecutorPod] = []

    def made() -> None:
        for i in created(rig):
            if i not in race.cluster:
                race.cluster[i] = "pending"
                race.events.append((i, "pending"))

    def deliver() -> None:
        executor_id, phase = race.events.pop(0)
        rig.store.update_pod(race.pod(executor_id, phase))
        if poll is not None:
            race.applied_after_mark[executor_id] = phase

    for step in steps:
        if step == "ask":  # the driver asks (again) for its target
            rig.allocator.set_total_expected_executors(target)
            made()
        elif step == "round":
            rig.store.notify_subscribers()
            made()
        elif step == "deliver" and race.events:
            deliver()
        elif step == "flush":
            while race.events:
                deliver()
        elif step == "start":
            waiting = sorted(i for i, phase in race.cluster.items() if phase == "pending")
            if waiting:
                executor_id = starts.choice(waiting)
                race.cluster[executor_id] = "running"
                race.events.append((executor_id, "running"))
        elif step == "mark" and poll is None:
            mark, poll = rig.store.begin_list(), "marked"
            race.applied_after_mark.clear()
        elif step == "read" and poll == "marked":
            listed, poll = [race.pod(i, p) for i, p in race.cluster.items()], "read"
        elif step == "apply" and poll == "read":
            before = set(rig.store.current_snapshot)
            rig.store.replace_snapshot(listed, since=mark)
            poll = None
            now = rig.store.current_snapshot
            assert before <= set(now), "a pod the store showed was dropped by an older list"
            for executor_id, phase in race.applied_after_mark.items():
                observed = now.get(executor_id)
                assert observed is not None, f"{executor_id} applied by the watch was dropped"
                assert observed.state.value == phase, f"{executor_id} went back"
        elif step == "relist":
            # The watch lists again (serially with its events): the server as it is now, and
            # the events queued so far are in the list.
            rig.store.replace_snapshot([race.pod(i, p) for i, p in race.cluster.items()])
            race.events.clear()
            race.applied_after_mark.clear()
        assert len(created(rig)) <= target, f"created {created(rig)} for a target of {target}"
    rig.store.notify_subscribers()
    assert len(created(rig)) <= target


def test_a_merged_snapshot_counts_its_states_afresh() -> None:
    store = scheduled_store()
    store.replace_snapshot([pending_executor(1), pending_executor(2)])
    mark = store.begin_list()
    store.update_pod(running_executor(7))
    store.replace_snapshot([pending_executor(1)], since=mark)
    snapshot: ExecutorPodsSnapshot = store.current_snapshot
    assert snapshot.count(ExecutorState.RUNNING) == 1
    assert snapshot.count(ExecutorState.PENDING) == 1
