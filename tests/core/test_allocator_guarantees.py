"""Issue 20: the allocator's guarantees (defects 4-7), each failing on fde8f25.

4. a failed scale-down delete is retried until the pods are gone, and `is_deleted` is true only
   while a delete was accepted or is being retried;
5. a Running pod being deleted counts as running until it is gone, as Spark 4.3 counts it;
6. the start tracker sees every snapshot of a batch, not only the last;
7. the allocation-maximum notice is told after the round issued the ids it still could.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime

import pytest
from execpods.core import AllocatorNotice, ApiUnavailable, CoreSettings, NoticeKind
from execpods.core.testing import TEST_APP_ID

from tests.core.allocator_support import IDLE, SPARK_SUITE, created, pod, spark_rig
from tests.core.conftest import AllocatorRig


def cluster_ids(rig: AllocatorRig) -> list[int]:
    return sorted(int(p.labels["spark-exec-id"]) for p in rig.pods.pods.values())


def idle_pending_pods(count: int) -> AllocatorRig:
    """A rig with `count` Pending pods older than the idle timeout: scale-down may take them."""
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(count)
    for i in created(rig):
        rig.store.update_pod(pod(rig, i, "pending"))
    rig.store.notify_subscribers()
    rig.clock.advance(IDLE * 2)
    return rig


def test_defect_4_a_failed_scale_down_delete_is_retried_until_the_pods_are_gone() -> None:
    rig = idle_pending_pods(3)
    rig.pods.fail_next_delete(ApiUnavailable("a webhook timed out"))
    rig.allocator.set_total_expected_executors(1)
    rig.store.notify_subscribers()
    assert cluster_ids(rig) == [1, 2, 3], "the delete failed"
    assert rig.allocator.is_deleted(1), "being retried: a late registration is refused"
    assert rig.allocator.is_deleted(2)
    assert not rig.allocator.is_deleted(3)
    assert rig.pods.created_executor_ids() == [1, 2, 3], "no replacement for the doomed pods"
    rig.store.notify_subscribers()
    assert cluster_ids(rig) == [1, 2, 3], "not before the back-off"
    rig.clock.advance(SPARK_SUITE.batch_delay)
    rig.store.notify_subscribers()
    assert cluster_ids(rig) == [3], "retried after the back-off, until gone"
    rig.store.replace_snapshot([pod(rig, 3, "pending")])
    rig.store.notify_subscribers()
    assert not rig.allocator.is_deleted(1)
    assert rig.pods.created_executor_ids() == [1, 2, 3]


def test_a_scale_down_delete_that_missed_a_pod_gone_running_stops_counting_it_deleted() -> None:
    rig = idle_pending_pods(2)
    rig.pods.pods[f"{TEST_APP_ID}-exec-1"] = dataclasses.replace(
        rig.pods.pods[f"{TEST_APP_ID}-exec-1"], phase="Running"
    )  # it starts just before the delete (status.phase=Pending) reaches it
    rig.allocator.set_total_expected_executors(1)
    rig.store.notify_subscribers()
    assert rig.allocator.is_deleted(1)
    assert cluster_ids(rig) == [1, 2]
    rig.store.update_pod(pod(rig, 1, "running"))
    rig.clock.advance(5 * SPARK_SUITE.batch_delay)
    rig.store.notify_subscribers()
    assert not rig.allocator.is_deleted(1), "its delete did not take it: it runs, and counts"
    # It counts again: the target of 1 is met by it, and the Pending pod 2 goes instead.
    assert cluster_ids(rig) == [1], "scale-down never deletes a running executor"


def test_defect_5_a_running_pod_being_deleted_is_counted_until_it_is_gone() -> None:
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(2)
    for i in created(rig):
        rig.store.update_pod(pod(rig, i, "running"))
    rig.store.notify_subscribers()
    terminating = dataclasses.replace(
        pod(rig, 2, "running"), deletion_timestamp=datetime.fromtimestamp(0, UTC)
    )
    rig.store.update_pod(terminating)
    rig.store.notify_subscribers()
    assert created(rig) == [1, 2], "Spark 4.3 counts it running until it is gone"
    rig.store.update_pod(dataclasses.replace(terminating, phase="Failed"))
    rig.store.notify_subscribers()
    assert created(rig) == [1, 2, 3], "replaced once it stopped"


def test_defect_6_an_executor_that_ran_then_failed_within_a_batch_started(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def start_failures() -> int:
        return sum(
            int(r.getMessage().split()[0])
            for r in caplog.records
            if "failed to start; creating more slowly" in r.getMessage()
        )

    caplog.set_level(logging.WARNING, logger="execpods.core.creator")
    rig = spark_rig(CoreSettings(batch_size=4))
    rig.allocator.set_total_expected_executors(4)
    for i in created(rig):
        rig.store.update_pod(pod(rig, i, "pending"))
    rig.store.notify_subscribers()
    rig.store.update_pod(pod(rig, 1, "running"))
    rig.store.update_pod(pod(rig, 1, "failed"))  # OOM-killed within one batch delay
    rig.store.notify_subscribers()
    assert start_failures() == 0
    rig.store.update_pod(pod(rig, 2, "failed"))  # never ran: that one failed to start
    rig.store.notify_subscribers()
    assert start_failures() == 1


def test_defect_7_the_maximum_notice_counts_the_ids_the_round_issued() -> None:
    rig = spark_rig(CoreSettings(batch_size=10, adaptive_batches=False, allocation_maximum=4))
    notices: list[AllocatorNotice] = []
    rig.backend.add_notice_listener(notices.append)
    rig.allocator.set_total_expected_executors(5)
    assert created(rig) == [1, 2, 3]
    (notice,) = notices
    assert notice.kind is NoticeKind.ALLOCATION_MAXIMUM_REACHED
    assert "3 executor ids were issued" in notice.message
    assert notice.count == 2
