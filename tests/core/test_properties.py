"""Property-based tests on event orderings, as SPARK-24248's design asks.

Kubernetes delivers events late, twice, or out of order, and a poll can land between any two of
them. These properties hold for every such ordering that hypothesis can find.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from execpods.core import (
    CoreSettings,
    DeterministicScheduler,
    ExecutorPod,
    ExecutorPodsSnapshot,
    ExecutorState,
    ManualClock,
)
from execpods.core.store import ScheduledSnapshotsStore
from execpods.core.testing import (
    deleted_executor,
    failed_executor,
    pending_executor,
    running_executor,
    succeeded_executor,
    terminating_executor,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from .conftest import make_allocator_rig, make_lifecycle_rig

FACTORIES = {
    "pending": pending_executor,
    "running": running_executor,
    "failed": failed_executor,
    "succeeded": succeeded_executor,
    "deleted": deleted_executor,
    "terminating": terminating_executor,
}
KINDS = sorted(FACTORIES)
IDS = st.integers(min_value=1, max_value=8)
POD = st.builds(lambda i, k: FACTORIES[k](i), IDS, st.sampled_from(KINDS))
PODS = st.lists(POD, max_size=12)

UPDATE = st.tuples(st.just("update"), POD)
NOTIFY = st.tuples(st.just("notify"), st.none())
REPLACE = st.tuples(st.just("replace"), PODS)
ACTIONS = st.lists(st.one_of(UPDATE, UPDATE, NOTIFY, REPLACE), max_size=40)


@settings(max_examples=200, deadline=None)
@given(events=st.lists(POD, max_size=30), final=PODS, deliver_every=st.integers(1, 5))
def test_any_event_order_then_a_full_list_converges_to_that_list(
    events: list[ExecutorPod], final: list[ExecutorPod], deliver_every: int
) -> None:
    scheduler = DeterministicScheduler(ManualClock())
    store = ScheduledSnapshotsStore(scheduler, clock=scheduler.clock)
    received: list[ExecutorPodsSnapshot] = []
    store.add_subscriber(float(deliver_every), received.extend)
    for event in events:
        store.update_pod(event)
        scheduler.tick(1.0)
    store.replace_snapshot(final)
    scheduler.tick(float(deliver_every))
    expected = ExecutorPodsSnapshot.from_pods(final, full_snapshot_ts=len(events))
    assert store.current_snapshot == expected
    assert received[-1] == expected
    assert len(received) == len(events) + 2, "one snapshot per update, none lost or repeated"


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("target"), st.integers(0, 25)),
            st.tuples(st.just("progress"), st.sampled_from(["running", "failed", "deleted"])),
            st.tuples(st.just("time"), st.integers(1, 90)),
            st.tuples(st.just("round"), st.none()),
        ),
        max_size=40,
    ),
    batch=st.integers(1, 6),
)
def test_the_2018_rule_never_exceeds_the_batch_size_or_the_target(
    steps: list[tuple[str, object]], batch: int
) -> None:
    """The 2018 rule as an explicit policy: fixed batches, none while anything is pending."""
    rig = make_allocator_rig(
        CoreSettings.from_properties(
            {
                "spark.kubernetes.allocation.batch.size": str(batch),
                "execpods.allocation.adaptiveBatches": "false",
                "execpods.allocation.waitForPendingPods": "true",
            }
        )
    )
    rig.store.replace_snapshot([])
    target = 0
    for kind, value in steps:
        # Between steps the watch reports the pods the allocator deleted (scale-down) as deleted.
        existing = {int(pod.labels["spark-exec-id"]) for pod in rig.pods.pods.values()}
        for executor_id, observed in list(rig.store.current_snapshot.items()):
            if executor_id not in existing and not observed.is_final:
                rig.store.update_pod(deleted_executor(executor_id))
        if kind == "target":
            assert isinstance(value, int)
            target = value
            before = len(rig.pods.created)
            rig.allocator.set_total_expected_executors(value)
            made = len(rig.pods.created) - before
        elif kind == "progress":
            # The cluster moves every pod it has: new ones appear pending, pending ones move on.
            for executor_id in sorted(existing):
                current = rig.store.current_snapshot.get(executor_id)
                if current is None:
                    rig.store.update_pod(pending_executor(executor_id))
                elif current.state is ExecutorState.PENDING:
                    rig.store.update_pod(FACTORIES[str(value)](executor_id))
            continue
        elif kind == "time":
            assert isinstance(value, int)
            rig.clock.advance(value)
            continue
        else:
            before = len(rig.pods.created)
            rig.store.notify_subscribers()
            made = len(rig.pods.created) - before
        latest = rig.store.current_snapshot
        running = latest.count(ExecutorState.RUNNING)
        assert made <= batch
        assert made <= max(0, target - running)
        if made:  # a pod scale-down deleted no longer counts, though the snapshot still shows it
            pending = [
                i
                for i, observed in latest.items()
                if observed.state is ExecutorState.PENDING and not rig.allocator.is_deleted(i)
            ]
            assert pending == []


@dataclass
class _Reference:
    """Newest Spark's lifecycle round, walking every executor of every snapshot: one delete per
    finished pod and round unless the round's latest snapshot shows it going or gone
    (SPARK-54198, SPARK-47797), and missing executors only against a new full list whose time is
    past their registration by more than the delta (SPARK-33711; registered at time 0 here)."""

    known: set[int]
    told: dict[int, float] = field(default_factory=dict)
    """When each executor was reported: never again for the manager's life (issue 20)."""
    last_full_ts: float = 0.0

    def round(
        self, batch: Sequence[ExecutorPodsSnapshot], now: float
    ) -> tuple[set[int], Counter[str]]:
        told_now: set[int] = set()
        finished: dict[int, str] = {}

        def tell(executor_id: int) -> None:
            if executor_id in told_now:
                return
            if executor_id not in self.told:
                self.told[executor_id] = now
                told_now.add(executor_id)
                self.known.discard(executor_id)

        for snapshot in batch:
            for executor_id, observed in snapshot.items():
                if not observed.is_final:
                    continue
                if observed.state is not ExecutorState.DELETED:
                    finished[executor_id] = observed.pod.name
                tell(executor_id)
        deletes: Counter[str] = Counter()
        if batch:
            latest = batch[-1]
            for executor_id, name in finished.items():
                current = latest.get(executor_id)
                if current is not None and current.pod.deletion_timestamp is None:
                    deletes[name] += 1
            if latest.full_snapshot_ts != self.last_full_ts:
                self.last_full_ts = latest.full_snapshot_ts
                if latest.full_snapshot_ts > CoreSettings().missing_pod_detect_delta:
                    for executor_id in sorted(self.known - set(latest)):
                        tell(executor_id)
        return told_now, deletes


@settings(max_examples=300, deadline=None)
@given(actions=ACTIONS, known=st.sets(IDS, max_size=4))
def test_lifecycle_deltas_do_exactly_what_the_full_walk_does(
    actions: list[tuple[str, object]], known: set[int]
) -> None:
    life = make_lifecycle_rig()
    life.driver.known = set(known)
    reference = _Reference(known=set(known))
    pending_batch: list[ExecutorPodsSnapshot] = []
    for kind, value in [*actions, ("notify", None)]:
        if kind == "update":
            assert isinstance(value, ExecutorPod)
            before = life.store.current_snapshot
            life.store.update_pod(value)
            if life.store.current_snapshot is not before:
                pending_batch.append(life.store.current_snapshot)
        elif kind == "replace":
            assert isinstance(value, list)
            life.clock.advance(20.0)  # lists come later and later: some past the delta
            life.store.replace_snapshot(value)
            pending_batch.append(life.store.current_snapshot)
        else:
            removed_before = len(life.driver.removed)
            deletes_before = Counter(call.name for call in life.pods.deletes)
            life.store.notify_subscribers()
            told_now = {i for i, _ in life.driver.removed[removed_before:]}
            deletes_now = Counter(call.name for call in life.pods.deletes) - deletes_before
            expected_told, expected_deletes = reference.round(pending_batch, life.clock.time())
            assert told_now == expected_told
            assert deletes_now == expected_deletes
            pending_batch = []


@settings(max_examples=200, deadline=None)
@given(actions=ACTIONS)
def test_the_driver_hears_once_per_executor_and_every_final_executor_is_reported(
    actions: list[tuple[str, object]],
) -> None:
    life = make_lifecycle_rig()
    ever_final: set[int] = set()
    for kind, value in [*actions, ("notify", None)]:
        if kind == "update":
            assert isinstance(value, ExecutorPod)
            life.store.update_pod(value)
        elif kind == "replace":
            assert isinstance(value, list)
            life.store.replace_snapshot(value)
        else:
            life.store.notify_subscribers()
            life.clock.advance(1.0)  # well inside the 3-minute cache window
            continue
        ever_final.update(i for i, s in life.store.current_snapshot.items() if s.is_final)
    counts = Counter(i for i, _ in life.driver.removed)
    assert all(n == 1 for n in counts.values()), counts
    assert ever_final <= set(counts)
