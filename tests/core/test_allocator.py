"""Spark's ExecutorPodsAllocatorSuite (SPARK-24248) as behaviour tests, and what it left unsaid."""

from __future__ import annotations

import pytest
from execpods.core import ApiUnavailable, CoreSettings, PodAdmissionRejected, PodSelector
from execpods.core.allocator import ExecutorCounts, executors_to_request
from execpods.core.testing import TEST_APP_ID, DeleteCall, failed_executor, running_executor

from .conftest import AllocatorRig, make_allocator_rig

BATCH = CoreSettings().batch_size


def test_initially_request_executors_in_batches_and_wait_for_the_first(rig: AllocatorRig) -> None:
    rig.allocator.set_total_expected_executors(BATCH + 1)
    rig.store.replace_snapshot([])
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == list(range(1, BATCH + 1))


def test_another_batch_is_requested_once_all_pending_executors_run(rig: AllocatorRig) -> None:
    rig.allocator.set_total_expected_executors(BATCH + 1)
    rig.store.replace_snapshot([])
    rig.store.notify_subscribers()
    for executor_id in range(1, BATCH):
        rig.store.update_pod(running_executor(executor_id))
    rig.store.notify_subscribers()
    assert BATCH + 1 not in rig.pods.created_executor_ids()

    rig.store.update_pod(running_executor(BATCH))
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids()[-1] == BATCH + 1

    rig.store.update_pod(running_executor(BATCH))
    rig.store.notify_subscribers()
    assert len(rig.pods.created) == BATCH + 1


def test_a_batch_that_fails_at_once_is_re_requested_next_round(rig: AllocatorRig) -> None:
    rig.allocator.set_total_expected_executors(BATCH)
    rig.store.replace_snapshot([])
    rig.store.notify_subscribers()
    for executor_id in range(1, BATCH):
        rig.store.update_pod(running_executor(executor_id))
    rig.store.update_pod(failed_executor(BATCH))
    rig.store.notify_subscribers()
    assert rig.pods.created_executor_ids() == [*range(1, BATCH + 1), BATCH + 1]


def test_an_executor_never_seen_is_deleted_and_requested_again(rig: AllocatorRig) -> None:
    rig.allocator.set_total_expected_executors(1)
    rig.store.replace_snapshot([])
    rig.store.notify_subscribers()
    rig.pods.pods.clear()  # the create never took effect, as far as the cluster is concerned
    rig.store.replace_snapshot([])
    rig.clock.set_time(rig.allocator.pod_creation_timeout + 1)
    rig.store.notify_subscribers()
    expected = PodSelector(
        labels={"spark-app-selector": TEST_APP_ID, "spark-role": "executor"},
        label_in={"spark-exec-id": frozenset({"1"})},
    )
    assert rig.pods.deletes == [DeleteCall(selector=expected)]
    assert rig.pods.created_executor_ids() == [1, 2]


def test_before_the_timeout_an_unseen_executor_blocks_new_batches(rig: AllocatorRig) -> None:
    rig.allocator.set_total_expected_executors(1)
    rig.store.replace_snapshot([])
    rig.store.notify_subscribers()
    rig.store.replace_snapshot([])
    rig.clock.set_time(rig.allocator.pod_creation_timeout)
    rig.store.notify_subscribers()
    assert rig.pods.deletes == []
    assert rig.pods.created_executor_ids() == [1]


def test_creation_timeout_follows_the_batch_delay() -> None:
    assert CoreSettings().pod_creation_timeout == 60.0
    slow = CoreSettings.from_properties({"spark.kubernetes.allocation.batch.delay": "30s"})
    assert slow.pod_creation_timeout == 150.0


def test_setting_the_target_re_evaluates_at_once_when_nothing_is_outstanding(
    rig: AllocatorRig,
) -> None:
    rig.store.replace_snapshot([])
    rig.store.notify_subscribers()
    assert rig.pods.created == []
    rig.allocator.set_total_expected_executors(2)  # notifies the store: a round runs now
    assert rig.pods.created_executor_ids() == [1, 2]
    rig.allocator.set_total_expected_executors(4)  # two outstanding: wait for the interval
    assert rig.pods.created_executor_ids() == [1, 2]


def test_a_refused_create_ends_the_batch_and_is_retried_next_round(rig: AllocatorRig) -> None:
    rig.pods.fail_next_create(PodAdmissionRejected("exceeded quota: pods"))
    rig.allocator.set_total_expected_executors(3)
    rig.store.replace_snapshot([])
    rig.store.notify_subscribers()
    assert rig.pods.created == [], "the rest of the batch waits after a refusal"
    rig.store.notify_subscribers()
    # Nothing outstanding holds this round back: the refused executor was not tracked.
    assert rig.pods.created_executor_ids() == [2, 3, 4]
    for executor_id in (2, 3, 4):
        rig.store.update_pod(running_executor(executor_id))
    rig.clock.set_time(rig.allocator.pod_creation_timeout + 1)
    rig.store.notify_subscribers()
    assert rig.pods.deletes == [], "and so nothing times out to be deleted"


def test_a_create_with_unknown_outcome_is_tracked_until_the_timeout(rig: AllocatorRig) -> None:
    rig.pods.fail_next_create(ApiUnavailable("connection reset"))
    rig.allocator.set_total_expected_executors(1)
    rig.store.replace_snapshot([])
    rig.store.notify_subscribers()
    rig.store.notify_subscribers()
    assert rig.pods.created == [], "an ambiguous create is not repeated before the timeout"
    assert rig.pods.deletes == []
    rig.clock.set_time(rig.allocator.pod_creation_timeout + 1)
    rig.store.notify_subscribers()
    # It was tracked as outstanding: the timeout deletes it by label in case it exists.
    assert rig.pods.deletes == [
        DeleteCall(selector=PodSelector.executors_of(rig.settings.labels, TEST_APP_ID, [1]))
    ]
    assert rig.pods.created_executor_ids() == [2]


def test_a_larger_batch_size_setting_is_honoured() -> None:
    rig = make_allocator_rig(
        CoreSettings.from_properties({"spark.kubernetes.allocation.batch.size": "20"})
    )
    rig.allocator.set_total_expected_executors(50)
    rig.store.replace_snapshot([])
    rig.store.notify_subscribers()
    assert len(rig.pods.created) == 20


@pytest.mark.parametrize(
    ("target", "running", "pending", "outstanding", "expected"),
    [
        (10, 0, 0, 0, 5),
        (10, 8, 0, 0, 2),
        (10, 10, 0, 0, 0),
        (10, 12, 0, 0, 0),
        (10, 0, 1, 0, 0),
        (10, 0, 0, 1, 0),
        (0, 0, 0, 0, 0),
    ],
)
def test_the_batch_rule(
    target: int, running: int, pending: int, outstanding: int, expected: int
) -> None:
    counts = ExecutorCounts(running=running, pending=pending)
    assert (
        executors_to_request(
            target=target, counts=counts, outstanding_requests=outstanding, batch_size=5
        )
        == expected
    )
