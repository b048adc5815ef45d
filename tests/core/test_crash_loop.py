"""A crash loop on a composed backend, on a manual clock: every executor fails 2 s after it is
created. The brake pauses requests at the rate, for 3 s then twice as long each time, resumes on
its own with a probe's worth, and the failure budget drains a probe per pause, not at full speed.
Without the brake (maxFailureRate=0) the same loop spends the budget in seconds."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from execpods.core import (
    AllocatorNotice,
    ContainerRunning,
    ContainerStatus,
    ContainerTerminated,
    CoreSettings,
    ManualClock,
    NoticeKind,
)
from execpods.core.compose import FeatureSettings
from execpods.core.crashloop import CrashLoopSettings
from execpods.core.testing import Composed, InMemoryPodOperations, compose_deterministic

EXECUTOR = "spark-kubernetes-executor"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class CrashLoop:
    """The cluster: each created pod runs a second after it is created, and fails `after` seconds
    after it was created, its container having run that long (the executor exits 1 at start-up)."""

    def __init__(self, composed: Composed, pods: InMemoryPodOperations, clock: ManualClock):
        self.composed, self.pods, self.clock = composed, pods, clock
        self.created_at: dict[str, float] = {}
        self.failed = 0

    def step(self, seconds: float, *, after: float = 2.0, disruption: str | None = None) -> None:
        """`seconds` of rounds, one a second: new pods are noted, due ones fail (disrupted by
        Kubernetes for `disruption`, a DisruptionTarget reason)."""
        for _ in range(int(seconds)):
            self.clock.advance(1.0)
            now = self.clock.monotonic()
            for name, listed in list(self.pods.pods.items()):
                pod = listed
                born = self.created_at.setdefault(name, now)
                if pod.phase in (None, "Pending") and now - born >= 1.0:
                    up = ContainerRunning(started_at=datetime.fromtimestamp(now, UTC))
                    running = replace(
                        pod,
                        phase="Running",
                        container_statuses=(ContainerStatus(name=EXECUTOR, state=up),),
                    )
                    self.pods.pods[name] = running
                    self.composed.store.update_pod(running)
                    pod = running
                if pod.phase != "Failed" and now - born >= after:
                    started = datetime.fromtimestamp(born, UTC)
                    dead = ContainerTerminated(
                        exit_code=1,
                        reason="Error",
                        started_at=started,
                        finished_at=started + timedelta(seconds=after),
                    )
                    failed = replace(
                        pod,
                        phase="Failed",
                        container_statuses=(ContainerStatus(name=EXECUTOR, state=dead),),
                        disruption=disruption,
                    )
                    self.pods.pods[name] = failed
                    self.composed.store.update_pod(failed)
                    self.failed += 1
            self.composed.store.notify_subscribers()


def rig(rate: str) -> tuple[CrashLoop, list[AllocatorNotice]]:
    clock = ManualClock(T0.timestamp())
    pods = InMemoryPodOperations()
    composed = compose_deterministic(
        settings=CoreSettings.from_properties({"spark.executor.maxNumFailures": "100000"}),
        pod_operations=pods,
        clock=clock,
        features=FeatureSettings(
            crash_loop=CrashLoopSettings.from_properties(
                {"execpods.crashLoop.maxFailureRate": rate}
            )
        ),
    )
    told: list[AllocatorNotice] = []
    composed.backend.add_notice_listener(told.append)
    composed.backend.start(initial_executors=0)
    composed.allocator.set_totals({0: 50})
    loop = CrashLoop(composed, pods, clock)
    return loop, told


def _kinds(told: list[AllocatorNotice], kind: NoticeKind) -> list[AllocatorNotice]:
    return [n for n in told if n.kind is kind]


def test_the_brake_pauses_at_the_rate_backs_off_and_resumes_on_its_own() -> None:
    loop, told = rig("10")
    loop.step(3)  # 50 created at 1 s, failed at 3 s: the rate (10 a minute) is passed
    (first,) = _kinds(told, NoticeKind.CRASH_LOOP_PAUSED)
    assert first.retry_in == 3.0
    assert "exited with code 1, Error after 2 s" in first.message
    paused_with = len(loop.pods.created)
    loop.step(2)
    assert len(loop.pods.created) == paused_with, "no creates while paused"
    assert _kinds(told, NoticeKind.CRASH_LOOP_RESUMED) == []
    loop.step(1)
    assert _kinds(told, NoticeKind.CRASH_LOOP_RESUMED), "resumed on its own"
    assert len(loop.pods.created) == paused_with + 10, "a probe's worth, not the target"
    # The loop goes on: each pause twice as long as the one before, up to the maximum.
    loop.step(900)
    pauses = [n.retry_in for n in _kinds(told, NoticeKind.CRASH_LOOP_PAUSED)]
    assert pauses[:8] == [3.0, 6.0, 12.0, 24.0, 48.0, 96.0, 192.0, 300.0]
    assert set(pauses[8:]) <= {300.0}
    # After the first pause at most a probe (10) starts at once: each later pause costs 10.
    assert len(loop.pods.created) - paused_with <= 10 * (len(pauses) - 1) + 10
    minutes = (loop.clock.monotonic() - T0.timestamp()) / 60.0
    assert loop.failed / minutes < 15, (loop.failed, minutes)


def test_without_the_brake_the_same_loop_spends_failures_at_full_speed() -> None:
    loop, told = rig("0")
    loop.step(60)
    assert _kinds(told, NoticeKind.CRASH_LOOP_PAUSED) == []
    assert loop.failed > 300  # a target of 50, replaced every 2 s


def test_a_quiet_minute_forgets_the_pauses() -> None:
    loop, told = rig("10")
    loop.step(3)
    assert len(_kinds(told, NoticeKind.CRASH_LOOP_PAUSED)) == 1
    # The cause is fixed: executors run from now on.
    loop.step(5, after=10**9)
    created_before = len(loop.pods.created)
    loop.step(70, after=10**9)
    assert len(_kinds(told, NoticeKind.CRASH_LOOP_PAUSED)) == 1
    assert len(loop.pods.created) >= 50, "the target is reached once it is quiet"
    assert len(loop.pods.created) > created_before


@pytest.mark.parametrize("disruption", [None, "PreemptionByScheduler"])
def test_a_loop_the_failure_rules_ignore_still_pauses_requests_unless_disrupted(
    disruption: str | None,
) -> None:
    """`Ignore onExitCodes In 1` spares the failure budget, not the API: each executor that
    fails at start still costs a create and a delete, so the brake pauses the loop as it would a
    counted one (only a disruption the rules ignore, an eviction or preemption, is no start
    failure)."""
    clock = ManualClock(T0.timestamp())
    pods = InMemoryPodOperations()
    composed = compose_deterministic(
        settings=CoreSettings.from_properties(
            {
                "spark.executor.maxNumFailures": "3",
                "execpods.executor.failureRules.1": "Ignore onExitCodes In 1",
            }
        ),
        pod_operations=pods,
        clock=clock,
        features=FeatureSettings(crash_loop=CrashLoopSettings.from_properties({})),
    )
    told: list[AllocatorNotice] = []
    composed.backend.add_notice_listener(told.append)
    composed.backend.start(initial_executors=0)
    composed.allocator.set_totals({0: 50})
    loop = CrashLoop(composed, pods, clock)
    loop.step(60, disruption=disruption)
    assert composed.backend.failed_executors == 0, "not counted either way"
    if disruption is not None:  # the cluster's doing, not a crash loop
        assert _kinds(told, NoticeKind.CRASH_LOOP_PAUSED) == []
        return
    assert _kinds(told, NoticeKind.CRASH_LOOP_PAUSED), "the loop is braked"
    assert loop.failed < 150, loop.failed  # a target of 50 replaced every 2 s: over 700
