"""Issue 11, restart safety: a sidecar restarted beside a running driver adopts what it finds.

On the landed code (8171a79) a restarted allocator started its ids at 1 again (each id still held
by a pod cost a round on a 409) and created a whole target's worth of pods beside the live ones.
"""

from __future__ import annotations

import dataclasses

from execpods.core import SPARK_LABELS, ApiUnavailable, CoreSettings, ExecutorPod, NoticeKind
from execpods.core.testing import TEST_APP_ID

from tests.core.conftest import make_allocator_rig

SETTINGS = CoreSettings(batch_size=10, adaptive_batches=False)


def cluster_pod(executor_id: int, phase: str, **extra: str) -> ExecutorPod:
    labels = {**SPARK_LABELS.for_executor(TEST_APP_ID, executor_id), **extra}
    return ExecutorPod(name=f"{TEST_APP_ID}-exec-{executor_id}", labels=labels, phase=phase)


def test_a_restarted_allocator_adopts_live_pods_and_continues_above_every_id_found() -> None:
    rig = make_allocator_rig(SETTINGS)
    existing = [
        cluster_pod(1, "Running"),
        cluster_pod(2, "Running"),
        cluster_pod(3, "Pending"),
        cluster_pod(4, "Failed"),  # finished while the sidecar was down: not adopted
        cluster_pod(9, "Failed", **{"spark-exec-inactive": "true"}),  # kept, reported earlier
    ]
    for pod in existing:
        rig.pods.pods[pod.name] = pod
    rig.allocator.set_total_expected_executors(4)
    # The live pods count as requested until the snapshots show them: nothing is duplicated.
    assert rig.pods.created_executor_ids() == []
    assert rig.allocator.outstanding_pods == 3
    for pod in existing[:4]:
        rig.store.update_pod(pod)
    rig.store.notify_subscribers()
    # Three live pods count toward the target: one create, with an id no pod ever had.
    assert rig.pods.created_executor_ids() == [10]
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == [10]


def test_nothing_is_created_before_the_existing_pods_are_known() -> None:
    rig = make_allocator_rig(SETTINGS)
    rig.pods.pods["p"] = cluster_pod(1, "Running")
    failing = rig.pods.list

    def down(selector):  # type: ignore[no-untyped-def]
        raise ApiUnavailable("503")

    rig.pods.list = down  # type: ignore[method-assign]
    rig.allocator.set_total_expected_executors(2)
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == []
    rig.pods.list = failing  # type: ignore[method-assign]
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == []  # pod 1 is adopted: wait for it to show
    rig.store.update_pod(cluster_pod(1, "Running"))
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == [2]


def test_an_id_held_by_a_pod_is_skipped_at_once_on_409() -> None:
    rig = make_allocator_rig(SETTINGS)
    rig.store.notify_subscribers()  # recovered: an empty cluster
    # Pods appear behind the allocator's back holding the next ids (another sidecar's race).
    for executor_id in (1, 2):
        pod = cluster_pod(executor_id, "Pending")
        rig.pods.pods[pod.name] = dataclasses.replace(pod)
    rig.allocator.set_total_expected_executors(1)
    assert rig.pods.created_executor_ids() == [3]  # in the same round, not a round per 409
    assert rig.told(NoticeKind.CREATE_FAILED) == 0
