"""Quota as capacity in a composed backend, on a manual clock: a namespace that admits 6 pods under
a target of 10 with spark.executor.maxNumFailures=3. The application is not failed, the target is
capped at 6, refused creates come one per back-off, room left by executors that go is used at
once, and once the quota is raised the target is reached and the cap lifted."""

from __future__ import annotations

import random
from dataclasses import replace

from execpods.core import (
    AdmissionPolicyRefused,
    AllocatorNotice,
    CoreSettings,
    ManualClock,
    NoticeKind,
    PodManifest,
    QuotaExceeded,
)
from execpods.core.compose import FeatureSettings
from execpods.core.quota import QuotaSettings
from execpods.core.testing import InMemoryPodOperations, compose_deterministic


class QuotaPods(InMemoryPodOperations):
    """Pods behind a ResourceQuota on the number of pods, refused as the API refuses them."""

    def __init__(self, hard: int) -> None:
        super().__init__()
        self.hard = hard
        self.refused = 0

    def create(self, manifest: PodManifest) -> None:
        used = len(self.pods)
        if used >= self.hard:
            self.refused += 1
            name = manifest["metadata"]["name"]
            raise QuotaExceeded(
                f'create pod failed: 403 pods "{name}" is forbidden: exceeded quota: compute, '
                f"requested: pods=1, used: pods={used}, limited: pods={self.hard}",
                quota="compute",
                requested={"pods": "1"},
                used={"pods": str(used)},
                limited={"pods": str(self.hard)},
            )
        super().create(manifest)


def test_a_quota_below_the_target_caps_it_and_fails_nothing() -> None:
    clock = ManualClock()
    pods = QuotaPods(hard=6)
    composed = compose_deterministic(
        settings=CoreSettings.from_properties({"spark.executor.maxNumFailures": "3"}),
        pod_operations=pods,
        clock=clock,
        rng=random.Random(7),
        features=FeatureSettings(
            quota=QuotaSettings.from_properties({"execpods.quota.maxRetryInterval": "8s"})
        ),
    )
    told: list[AllocatorNotice] = []
    failures: list[str] = []
    backend = composed.backend
    backend.add_notice_listener(told.append)
    backend.start(initial_executors=0)
    backend.open_stream(
        1.0,
        on_snapshots=lambda _: None,
        on_removal=lambda _: None,
        on_application_failure=failures.append,
    )
    store = composed.store

    def rounds(seconds: int) -> None:
        for _ in range(seconds):
            clock.advance(1.0)
            for pod in list(pods.pods.values()):
                store.update_pod(replace(pod, phase="Running"))
            store.notify_subscribers()

    composed.allocator.set_totals({0: 10})
    rounds(1)
    assert len(pods.pods) == 6
    exceeded = [n for n in told if n.kind is NoticeKind.QUOTA_EXCEEDED]
    assert exceeded
    assert "ResourceQuota compute: requested pods=1, used pods=6, limited pods=6" in (
        exceeded[0].message
    )
    assert backend.effective_targets() == {0: 6}
    assert backend.kept_out_by_quota() == 4
    # A minute full: refusals come one per back-off (1, 2, 4, 8, 8... s), nothing fails.
    before = pods.refused
    rounds(60)
    assert failures == []
    assert backend.failed_executors == 0
    assert pods.refused - before <= 12, pods.refused - before
    # An executor goes: its room is used at once, without waiting for the back-off.
    gone = sorted(pods.pods)[0]
    store.update_pod(replace(pods.pods.pop(gone), gone=True))
    refused = pods.refused
    rounds(1)
    assert len(pods.pods) == 6
    assert pods.refused == refused
    # Raised: the next probe goes through and slow start reaches the target.
    pods.hard = 10
    rounds(12)
    assert len(pods.pods) == 10
    assert [n for n in told if n.kind is NoticeKind.QUOTA_CAP_LIFTED]
    assert backend.effective_targets() == {0: 10}
    assert backend.kept_out_by_quota() == 0
    assert failures == []
    assert backend.failed_executors == 0


def test_a_limit_range_refusal_is_no_failure_and_is_backed_off() -> None:
    """Namespace policy (a LimitRange's bound): told with the API's words, backed off, never
    counted toward spark.executor.maxNumFailures (it will not mend on its own, but no executor
    failed either)."""
    clock = ManualClock()
    pods = InMemoryPodOperations()
    composed = compose_deterministic(
        settings=CoreSettings.from_properties({"spark.executor.maxNumFailures": "1"}),
        pod_operations=pods,
        clock=clock,
        rng=random.Random(7),
    )
    told: list[AllocatorNotice] = []
    composed.backend.add_notice_listener(told.append)
    composed.backend.start(initial_executors=0)
    words = 'pods "p" is forbidden: maximum cpu usage per Container is 2, but limit is 4'
    for _ in range(20):
        pods.fail_next_create(AdmissionPolicyRefused(words, policy="LimitRange"))
    composed.allocator.set_totals({0: 5})
    for _ in range(30):
        clock.advance(1.0)
        composed.store.notify_subscribers()
    refusals = [n for n in told if n.kind is NoticeKind.ADMISSION_POLICY_REFUSED]
    assert refusals
    assert "refused by the namespace's LimitRange" in refusals[0].message
    assert words in refusals[0].message
    assert composed.backend.failed_executors == 0
    assert len(refusals) <= 6, "backed off, not retried every round"
