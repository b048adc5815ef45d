"""Issue 20: an executor id is never issued twice, across restarts too (defects 1, 9, 11).

Each test fails on fde8f25: ids continued above the highest id *still in the cluster*, one
hand-made pod with a huge id stopped allocation, and ids were spent on creates never sent.
"""

from __future__ import annotations

from execpods.core import (
    SPARK_LABELS,
    AllocatorNotice,
    ApiThrottled,
    CoreSettings,
    ExecutorPod,
    NoticeKind,
)
from execpods.core.testing import TEST_APP_ID, InMemoryIdLedger, InMemoryPodOperations

from tests.core.conftest import make_allocator_rig

SETTINGS = CoreSettings(batch_size=10, adaptive_batches=False, id_block=5)


def pod_of(executor_id: int, phase: str = "Running", raw_id: str | None = None) -> ExecutorPod:
    labels = SPARK_LABELS.for_executor(TEST_APP_ID, executor_id)
    if raw_id is not None:
        labels[SPARK_LABELS.executor_id] = raw_id
    return ExecutorPod(
        name=f"{TEST_APP_ID}-exec-{raw_id or executor_id}", labels=labels, phase=phase
    )


def test_defect_1_ids_are_not_reused_after_a_restart_once_their_pods_are_gone() -> None:
    cluster = InMemoryPodOperations()
    ledger = InMemoryIdLedger()
    first = make_allocator_rig(SETTINGS, pods=cluster, id_ledger=ledger)
    first.allocator.set_total_expected_executors(3)
    assert first.pods.created_executor_ids() == [1, 2, 3]
    assert ledger.highest >= 3, "reserved before use"
    cluster.pods.clear()  # killed, deleted, gone: a scale to zero leaves nothing to read back
    second = make_allocator_rig(SETTINGS, pods=cluster, id_ledger=ledger)
    second.allocator.set_total_expected_executors(3)
    again = cluster.created_executor_ids()[3:]
    assert again == [6, 7, 8], "above the ledger's mark (a block of 5): none issued again"
    assert len(set(cluster.created_executor_ids())) == len(cluster.created)


def test_ids_continue_above_the_ledger_mark_and_the_highest_adopted_pod() -> None:
    cluster = InMemoryPodOperations()
    cluster.pods["p"] = pod_of(30)
    rig = make_allocator_rig(SETTINGS, pods=cluster, id_ledger=InMemoryIdLedger(highest=40))
    rig.allocator.set_total_expected_executors(2)
    rig.store.update_pod(cluster.pods["p"])
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == [41]
    other = make_allocator_rig(SETTINGS, pods=InMemoryPodOperations())
    other.pods.pods["p"] = pod_of(30)
    other.allocator.set_total_expected_executors(2)  # no ledger: the pods are all there is
    other.store.update_pod(other.pods.pods["p"])
    other.store.notify_subscribers()
    assert other.pods.created_executor_ids() == [31]


def test_a_scale_up_to_10000_costs_a_few_ledger_writes() -> None:
    ledger = InMemoryIdLedger()
    rig = make_allocator_rig(CoreSettings(batch_size=20), id_ledger=ledger)
    rig.allocator.set_total_expected_executors(10_000)
    for _ in range(200):
        rig.store.replace_snapshot([pod_of(i, "Running") for i in rig.pods.created_executor_ids()])
        rig.store.notify_subscribers()
        if len(rig.pods.created) >= 10_000:
            break
    assert len(rig.pods.created) == 10_000
    assert ledger.writes <= 6, f"{ledger.writes} writes for 10,000 ids"
    assert ledger.highest >= 10_000


def test_an_unwritable_ledger_issues_no_id_above_its_mark_and_is_retried_with_back_off() -> None:
    ledger = InMemoryIdLedger()
    ledger.fail_writes = True
    rig = make_allocator_rig(SETTINGS, id_ledger=ledger)
    notices: list[AllocatorNotice] = []
    rig.backend.add_notice_listener(notices.append)
    rig.allocator.set_total_expected_executors(3)
    assert rig.pods.created == []
    assert [n.kind for n in notices] == [
        NoticeKind.ID_RESERVATION_FAILED,
        NoticeKind.ALLOCATION_STALLED,  # issue 32: and health is NOT_SERVING meanwhile
    ]
    assert notices[0].count == 3
    attempts = []
    real = ledger.reserve_through

    def counting(executor_id: int) -> None:
        attempts.append(rig.clock.monotonic())
        real(executor_id)

    ledger.reserve_through = counting  # type: ignore[method-assign]
    for _ in range(10):  # ten rounds within 1.5 s: the back-off (1 s, then 2 s) allows one try
        rig.clock.advance(0.15)
        rig.store.notify_subscribers()
    assert len(attempts) == 1
    assert rig.pods.created == []
    assert len(notices) == 2, "noticed once per outage, not every round"
    ledger.fail_writes = False
    rig.clock.advance(2.0)
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == [1, 2, 3]
    assert notices[-1].kind is NoticeKind.ALLOCATION_RESUMED
    assert ledger.highest >= 3


def test_defect_9_a_hand_made_pod_with_a_huge_id_does_not_stop_allocation() -> None:
    cluster = InMemoryPodOperations()
    cluster.pods["huge"] = pod_of(2147483646)
    rig = make_allocator_rig(SETTINGS, pods=cluster, id_ledger=InMemoryIdLedger())
    notices: list[AllocatorNotice] = []
    rig.backend.add_notice_listener(notices.append)
    rig.allocator.set_total_expected_executors(2)
    assert rig.pods.created_executor_ids() == [1, 2]
    assert notices == []


def test_an_empty_ledger_leaves_the_pods_to_go_by() -> None:
    """A ledger deleted by hand (or never written) reads 0: ids continue above the pods."""
    cluster = InMemoryPodOperations()
    for i in (1, 2, 3):
        cluster.pods[f"p{i}"] = pod_of(i)
    rig = make_allocator_rig(SETTINGS, pods=cluster, id_ledger=InMemoryIdLedger())
    rig.allocator.set_total_expected_executors(4)
    for pod in cluster.pods.values():
        rig.store.update_pod(pod)
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == [4]


def test_ids_at_or_above_the_maximum_are_not_adopted() -> None:
    cluster = InMemoryPodOperations()
    cluster.pods["big"] = pod_of(500)
    settings = CoreSettings(batch_size=10, adaptive_batches=False, allocation_maximum=100)
    rig = make_allocator_rig(settings, pods=cluster)
    rig.allocator.set_total_expected_executors(2)
    assert rig.pods.created_executor_ids() == [1, 2]


def test_defect_11_an_id_is_spent_only_when_its_create_is_sent() -> None:
    rig = make_allocator_rig(SETTINGS)
    rig.pods.fail_next_create(ApiThrottled("held back", retry_after=20.0))
    rig.allocator.set_total_expected_executors(10)
    for _ in range(25):  # a 20 s throttle, a round a second
        rig.clock.advance(1.0)
        rig.store.notify_subscribers()
    ids = rig.pods.created_executor_ids()
    assert sorted(ids) == list(range(1, 11)), ids
    assert rig.ids.issued == 10


def test_the_allocation_maximum_counts_only_ids_sent() -> None:
    rig = make_allocator_rig(CoreSettings(batch_size=10, adaptive_batches=False, **{}))
    for _ in range(3):
        rig.pods.fail_next_create(ApiThrottled("slow", retry_after=1.0))
    rig.allocator.set_total_expected_executors(4)
    for _ in range(5):
        rig.clock.advance(1.1)
        rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == [1, 2, 3, 4]
