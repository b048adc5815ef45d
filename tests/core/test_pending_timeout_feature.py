"""The pending timeout in a composed backend, on a manual clock: executors no node fits stay
Pending; past execpods.executor.pendingTimeout the driver hears why, and the action applies (wait:
nothing more; replace: deleted and requested again; lowerTarget: deleted, the effective target
lowered until the driver sets a new one)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from execpods.core import (
    AllocatorNotice,
    CoreSettings,
    ExecutorRemoval,
    ManualClock,
    NoticeKind,
    PodCondition,
)
from execpods.core.compose import FeatureSettings
from execpods.core.pendingtimeout import PendingTimeoutSettings
from execpods.core.testing import Composed, InMemoryPodOperations, compose_deterministic

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = "0/3 nodes are available: 3 Insufficient cpu."
STUCK = PodCondition(type="PodScheduled", status="False", reason="Unschedulable", message=WORDS)


class Rig:
    def __init__(self, action: str) -> None:
        self.clock = ManualClock(T0.timestamp())
        self.pods = InMemoryPodOperations()
        self.composed: Composed = compose_deterministic(
            settings=CoreSettings(),
            pod_operations=self.pods,
            clock=self.clock,
            features=FeatureSettings(
                pending_timeout=PendingTimeoutSettings.from_properties(
                    {
                        "execpods.executor.pendingTimeout": "10min",
                        "execpods.executor.pendingTimeoutAction": action,
                    }
                )
            ),
        )
        self.told: list[AllocatorNotice] = []
        self.removed: list[ExecutorRemoval] = []
        backend = self.composed.backend
        backend.add_notice_listener(self.told.append)
        backend.start(initial_executors=0)
        backend.open_stream(
            1.0, on_snapshots=lambda _: None, on_removal=lambda r: self.removed.append(r.removal)
        )

    def sync(self) -> None:
        """The API's pods, as the watch would report them (stuck: Unschedulable), then a round;
        pods the API deleted are reported gone."""
        store = self.composed.store
        listed = dict(self.pods.pods)
        now = datetime.fromtimestamp(self.clock.time(), UTC)
        for name, pod in listed.items():
            stuck = pod
            if pod.creation_timestamp is None:
                stuck = replace(pod, creation_timestamp=now, conditions=(STUCK,))
                self.pods.pods[name] = stuck
            store.update_pod(stuck)
        for observed in store.current_snapshot.executor_pods.values():
            if observed.pod.name not in listed and not observed.pod.gone:
                store.update_pod(replace(observed.pod, gone=True))
        store.notify_subscribers()

    def timeouts(self) -> list[AllocatorNotice]:
        return [n for n in self.told if n.kind is NoticeKind.PENDING_TIMEOUT]

    def ids(self) -> list[int]:
        return sorted(int(p.labels["spark-exec-id"]) for p in self.pods.pods.values())


def test_wait_tells_once_with_the_schedulers_words_and_keeps_the_executors() -> None:
    rig = Rig("wait")
    rig.composed.allocator.set_totals({0: 2})
    rig.sync()
    assert rig.ids() == [1, 2]
    rig.clock.advance(599)
    rig.sync()
    assert rig.timeouts() == []
    rig.clock.advance(2)
    rig.sync()
    (notice,) = rig.timeouts()
    assert notice.count == 2
    assert f"2 x Unschedulable: {WORDS}" in notice.message
    assert "still waiting for them" in notice.message
    rig.clock.advance(60)
    rig.sync()
    assert len(rig.timeouts()) == 1, "once per executor"
    assert rig.ids() == [1, 2]


def test_replace_deletes_them_and_requests_as_many_again() -> None:
    rig = Rig("replace")
    rig.composed.allocator.set_totals({0: 2})
    rig.sync()
    rig.clock.advance(601)
    rig.sync()
    assert len(rig.timeouts()) == 1
    rig.sync()  # their deletion seen: two new executors are requested
    rig.sync()
    assert rig.ids() == [3, 4]
    reasons = {r.executor_id: r.reason for r in rig.removed}
    assert sorted(reasons) == [1, 2]
    assert "pending longer than execpods.executor.pendingTimeout" in reasons[1].message
    assert not reasons[1].exit_caused_by_app
    assert rig.composed.backend.failed_executors == 0


def test_lower_target_goes_on_with_fewer_until_the_driver_sets_a_new_target() -> None:
    rig = Rig("lowerTarget")
    rig.composed.allocator.set_totals({0: 3})
    rig.sync()
    rig.clock.advance(601)
    rig.sync()
    (notice,) = rig.timeouts()
    assert "effective target lowered to 0" in notice.message
    for _ in range(3):
        rig.sync()
    assert rig.ids() == []
    assert rig.composed.backend.effective_targets() == {0: 0}
    assert rig.composed.backend.targets() == {0: 3}
    rig.composed.allocator.set_totals({0: 2})  # the driver's new target lifts the lowering
    rig.sync()
    rig.sync()
    assert rig.ids() == [4, 5]
    assert rig.composed.backend.effective_targets() == {0: 2}
