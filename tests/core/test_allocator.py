"""Newest Spark's ExecutorPodsAllocatorSuite, ported scenario by scenario (named after its tests).

The rig runs Spark's suite settings: batch size 5, executor idle timeout 10 s, adaptive batches
off, so every count below is Spark's. `RecordingDriver.known` plays the scheduler backend's
`getExecutorIds`. Creation errors, the 2018 rule and adaptive batches: test_allocator_creation.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from execpods.core import AllocatorNotice, CoreSettings, NoticeKind, PodSelector, SettingsError
from execpods.core.allocation import split_slots
from execpods.core.testing import DeleteCall

from .allocator_support import (
    APP_LABELS,
    IDLE,
    RP,
    SPARK_SUITE,
    START,
    created,
    deleted_ids,
    pod,
    profile_of,
    spark_rig,
)

# Newest Spark's suite.


def test_SPARK_49447_prevent_small_values_less_than_100_for_batch_delay() -> None:
    with pytest.raises(SettingsError, match=r"batch.delay=0.001 is invalid: it must be greater"):
        CoreSettings.from_properties({"spark.kubernetes.allocation.batch.delay": "1"})
    with pytest.raises(SettingsError, match=r"greater than 0\.1s"):
        CoreSettings.from_properties({"spark.kubernetes.allocation.batch.delay": "100ms"})
    assert CoreSettings.from_properties(
        {"spark.kubernetes.allocation.batch.delay": "101ms"}
    ).batch_delay == pytest.approx(0.101)


def test_SPARK_36052_test_split_slots() -> None:
    assert split_slots(["a"], 0) == [("a", 0)]
    assert split_slots(["a"], 1) == [("a", 1)]
    assert split_slots(["a"], 2) == [("a", 2)]
    abc = ["a", "b", "c"]
    assert split_slots(abc, 0) == [("a", 0), ("b", 0), ("c", 0)]
    assert split_slots(abc, 1) == [("a", 1), ("b", 0), ("c", 0)]
    assert split_slots(abc, 2) == [("a", 1), ("b", 1), ("c", 0)]
    assert split_slots(abc, 3) == [("a", 1), ("b", 1), ("c", 1)]
    assert split_slots(abc, 4) == [("a", 2), ("b", 1), ("c", 1)]


def test_SPARK_36052_pending_pod_limit_with_multiple_resource_profiles() -> None:
    rig = spark_rig(replace(SPARK_SUITE, max_pending_pods=3), profiles=True)
    rig.allocator.set_totals({0: 2, RP: 3})
    assert rig.allocator.outstanding_pods == 3
    assert created(rig) == [1, 2, 3]
    assert [profile_of(rig, i) for i in (1, 2, 3)] == [0, 0, RP]

    # 2 and 3 pending, 1 still unseen: no free pending slot, nothing new.
    rig.store.update_pod(pod(rig, 2, "pending"))
    rig.store.update_pod(pod(rig, 3, "pending", RP))
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 3
    assert created(rig) == [1, 2, 3]
    assert rig.pods.deletes == []

    # Scaling the default profile down frees a slot, which the other profile takes.
    rig.clock.advance(IDLE * 2)
    rig.allocator.set_totals({0: 1, RP: 3})
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 3
    assert deleted_ids(rig) == [[1]]
    assert created(rig)[-1] == 4
    assert profile_of(rig, 4) == RP

    # One starts running: one more slot.
    rig.store.update_pod(pod(rig, 3, "running", RP))
    rig.store.update_pod(pod(rig, 4, "pending", RP))
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 3
    assert created(rig)[-1] == 5
    assert profile_of(rig, 5) == RP
    assert len(rig.pods.deletes) == 1


def test_initially_request_executors_in_batches_not_another_until_the_first_finished() -> None:
    """Spark's test: Initially request executors in batches. Do not request another batch if
    the first has not finished.
    """
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(6)
    assert rig.allocator.outstanding_pods == 5
    assert created(rig) == [1, 2, 3, 4, 5]


def test_request_executors_in_batches_another_batch_once_all_pending_start_running() -> None:
    """Spark's test: Request executors in batches. Allow another batch to be requested if all
    pending executors start running.
    """
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(6)
    assert rig.allocator.outstanding_pods == 5
    for executor_id in range(1, 5):
        rig.store.update_pod(pod(rig, executor_id, "running"))
    assert rig.ids.issued == 5
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 1
    assert created(rig) == [1, 2, 3, 4, 5]
    rig.store.update_pod(pod(rig, 5, "running"))
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 1
    assert created(rig)[-1] == 6
    rig.store.update_pod(pod(rig, 5, "running"))
    rig.store.notify_subscribers()
    assert len(created(rig)) == 6


def test_when_a_batch_reaches_error_states_immediately_re_request_them_next_batch() -> None:
    """Spark's test: When a current batch reaches error states immediately, re-request them
    on the next batch.
    """
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(5)
    assert rig.allocator.outstanding_pods == 5
    for executor_id in range(1, 5):
        rig.store.update_pod(pod(rig, executor_id, "running"))
    rig.store.update_pod(pod(rig, 5, "failed"))
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 1
    assert created(rig)[-1] == 6


def test_when_the_api_does_not_report_a_requested_executor_in_time_retry_it() -> None:
    """Spark's test: When an executor is requested but the API does not report it in a
    reasonable time, retry requesting that executor.
    """
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(1)
    assert created(rig) == [1]
    rig.pods.pods.clear()  # the create never took effect, as far as the cluster is concerned
    rig.clock.set_time(START + rig.settings.pod_creation_timeout + 1)
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 1
    expected = PodSelector(labels=APP_LABELS, label_in={"spark-exec-id": frozenset({"1"})})
    assert rig.pods.deletes == [DeleteCall(selector=expected)]
    assert created(rig) == [1, 2]


def test_SPARK_28487_scale_up_and_down_on_target_executor_count_changes() -> None:
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(1)
    assert rig.allocator.outstanding_pods == 1
    assert created(rig) == [1]

    rig.store.update_pod(pod(rig, 1, "running"))
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 0
    assert rig.pods.deletes == []

    rig.allocator.set_total_expected_executors(4)
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 3
    assert created(rig) == [1, 2, 3, 4]

    rig.store.update_pod(pod(rig, 2, "running"))
    rig.store.update_pod(pod(rig, 3, "pending"))
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 2
    assert rig.pods.deletes == []

    # Down to 1: the pending pod and the unseen request go; the running ones stay.
    rig.clock.advance(IDLE * 2)
    rig.allocator.set_total_expected_executors(1)
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 0
    assert len(created(rig)) == 4
    assert deleted_ids(rig) == [[3, 4]]
    (call,) = rig.pods.deletes
    assert call.selector is not None
    assert call.selector.phase == "Pending"
    assert rig.allocator.is_deleted(3)
    assert rig.allocator.is_deleted(4)

    # Once the snapshots no longer hold them, they are forgotten.
    rig.store.replace_snapshot([pod(rig, 1, "running"), pod(rig, 2, "running")])
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 0
    assert not rig.allocator.is_deleted(3)
    assert not rig.allocator.is_deleted(4)


def test_SPARK_34334_correctly_identify_timed_out_pending_pod_requests_as_excess() -> None:
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(1)
    assert created(rig) == [1]
    rig.store.update_pod(pod(rig, 1, "pending"))
    rig.store.notify_subscribers()

    rig.clock.advance(IDLE)
    rig.allocator.set_total_expected_executors(2)
    rig.store.notify_subscribers()
    assert created(rig) == [1, 2]

    rig.allocator.set_total_expected_executors(1)
    rig.store.notify_subscribers()
    assert rig.pods.deletes == []

    rig.clock.advance(IDLE)
    rig.store.notify_subscribers()
    # The young unseen request 2 must not use up the excess: the old pending pod 1 goes.
    assert deleted_ids(rig) == [[1]]


def test_SPARK_33099_respect_executor_idle_timeout_configuration() -> None:
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(5)
    assert rig.allocator.outstanding_pods == 5
    assert created(rig) == [1, 2, 3, 4, 5]
    rig.store.update_pod(pod(rig, 1, "pending"))
    rig.store.update_pod(pod(rig, 2, "pending"))

    # Young requests and pods (known or not) are protected by the idle timeout.
    rig.allocator.set_total_expected_executors(0)
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 5
    assert rig.pods.deletes == []

    # Old enough now; 1, 3 and 4 are known to the driver and stay (SPARK-34361).
    rig.clock.advance(IDLE * 2)
    rig.driver.known.update({1, 3, 4})
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 0
    assert deleted_ids(rig) == [[2, 5]]


def test_SPARK_34361_scheduler_backend_known_pods_with_multiple_profiles_at_downscaling() -> None:
    """Spark's test: SPARK-34361: scheduler backend known pods with multiple resource
    profiles at downscaling.
    """
    rig = spark_rig(profiles=True)
    # 0) 3 of the default profile, 4 of the other.
    rig.allocator.set_totals({0: 3, RP: 4})
    assert rig.allocator.outstanding_pods == 7
    assert [profile_of(rig, i) for i in range(1, 8)] == [0, 0, 0, RP, RP, RP, RP]

    # 1) One of each known to the driver: no longer outstanding.
    rig.driver.known.update({1, 4})
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 5, "driver-known requests are not outstanding"
    assert len(created(rig)) == 7

    # 2) More known, some pending.
    rig.driver.known.update({2, 5})
    rig.store.update_pod(pod(rig, 2, "pending"))
    rig.store.update_pod(pod(rig, 3, "pending"))
    rig.store.update_pod(pod(rig, 5, "pending", RP))
    rig.store.update_pod(pod(rig, 6, "pending", RP))
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 3
    assert len(created(rig)) == 7

    # 3) Down to 1 and 1: only what the driver does not know goes.
    rig.clock.advance(IDLE * 2)
    rig.allocator.set_totals({0: 1, RP: 1})
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 0
    assert len(created(rig)) == 7
    assert deleted_ids(rig) == [[3], [6, 7]]
    assert all(rig.allocator.is_deleted(i) for i in (3, 6, 7))

    # 4) Up to 2 and 2: the known executors already make up the numbers.
    rig.allocator.set_totals({0: 2, RP: 2})
    rig.store.notify_subscribers()
    assert len(created(rig)) == 7
    assert rig.allocator.outstanding_pods == 0

    # 5) One more each.
    rig.allocator.set_totals({0: 3, RP: 3})
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 2
    assert created(rig)[7:] == [8, 9]
    assert (profile_of(rig, 8), profile_of(rig, 9)) == (0, RP)


def test_SPARK_33288_multiple_resource_profiles() -> None:
    rig = spark_rig(profiles=True)
    rig.allocator.set_totals({0: 1, RP: 2})
    assert rig.allocator.outstanding_pods == 3
    assert [profile_of(rig, i) for i in (1, 2, 3)] == [0, RP, RP]

    rig.store.update_pod(pod(rig, 1, "running"))
    rig.store.update_pod(pod(rig, 2, "running", RP))
    rig.store.update_pod(pod(rig, 3, "running", RP))
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 0
    assert rig.pods.deletes == []

    rig.allocator.set_totals({0: 4, RP: 3})
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 4
    assert [profile_of(rig, i) for i in (4, 5, 6, 7)] == [0, 0, 0, RP]

    rig.store.update_pod(pod(rig, 4, "running"))
    rig.store.update_pod(pod(rig, 5, "pending"))
    rig.store.update_pod(pod(rig, 7, "pending", RP))
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 3
    assert len(created(rig)) == 7
    assert rig.pods.deletes == []

    rig.clock.advance(IDLE * 2)
    rig.allocator.set_totals({0: 1, RP: 1})
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 0
    assert deleted_ids(rig) == [[5, 6], [7]]
    assert all(rig.allocator.is_deleted(i) for i in (5, 6, 7))

    remaining = [pod(rig, i, "running", rp) for i, rp in ((1, 0), (2, RP), (3, RP), (4, 0))]
    rig.store.replace_snapshot(remaining)
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 0
    assert not any(rig.allocator.is_deleted(i) for i in (5, 6, 7))


def test_SPARK_33262_pod_allocator_does_not_stall_with_pending_pods() -> None:
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(6)
    assert rig.allocator.outstanding_pods == 5
    assert created(rig) == [1, 2, 3, 4, 5]
    rig.store.update_pod(pod(rig, 1, "pending"))
    for executor_id in range(2, 6):
        rig.store.update_pod(pod(rig, executor_id, "running"))
    rig.clock.advance(SPARK_SUITE.batch_delay + 1)
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 2
    assert created(rig)[-1] == 6


# Newest Spark's settings and rules the suite covers only indirectly.


def test_creation_timeout_is_the_larger_of_five_batch_delays_and_the_executor_timeout() -> None:
    assert CoreSettings().pod_creation_timeout == 600.0
    slow = CoreSettings.from_properties(
        {
            "spark.kubernetes.allocation.batch.delay": "200s",
            "spark.kubernetes.allocation.executor.timeout": "30s",
        }
    )
    assert slow.pod_creation_timeout == 1000.0


def test_an_unseen_request_blocks_its_profile_until_the_creation_timeout() -> None:
    rig = spark_rig()
    rig.allocator.set_total_expected_executors(1)
    rig.pods.pods.clear()
    rig.clock.set_time(START + rig.settings.pod_creation_timeout)
    rig.store.notify_subscribers()
    assert rig.pods.deletes == []
    assert created(rig) == [1]


def test_max_pending_pods_per_rp_caps_each_profile_on_its_own() -> None:
    settings = replace(SPARK_SUITE, max_pending_pods=5, max_pending_pods_per_rp_setting=2)
    rig = spark_rig(settings, profiles=True)
    rig.allocator.set_totals({0: 4, RP: 4})
    assert [profile_of(rig, i) for i in created(rig)] == [0, 0, RP, RP]
    for executor_id, rp in ((1, 0), (2, 0), (3, RP), (4, RP)):
        rig.store.update_pod(pod(rig, executor_id, "pending", rp))
    rig.store.notify_subscribers()
    assert len(created(rig)) == 4, "each profile has its 2 pending"
    rig.store.update_pod(pod(rig, 1, "running"))
    rig.store.notify_subscribers()
    assert created(rig)[-1] == 5
    assert profile_of(rig, 5) == 0


def test_max_pending_pods_per_rp_may_not_exceed_max_pending_pods() -> None:
    with pytest.raises(SettingsError, match="maxPendingPodsPerRp=4 is invalid: it must not exceed"):
        CoreSettings.from_properties(
            {
                "spark.kubernetes.allocation.maxPendingPods": "3",
                "spark.kubernetes.allocation.maxPendingPodsPerRp": "4",
            }
        )


def test_allocation_maximum_stops_allocation_and_tells_the_driver_once() -> None:
    rig = spark_rig(replace(SPARK_SUITE, allocation_maximum=4))
    notices: list[AllocatorNotice] = []
    rig.backend.add_notice_listener(notices.append)
    rig.allocator.set_total_expected_executors(5)
    assert created(rig) == [1, 2, 3], "as Spark, no id at or above the maximum is issued"
    (notice,) = notices
    assert notice.kind is NoticeKind.ALLOCATION_MAXIMUM_REACHED
    assert "spark.kubernetes.allocation.maximum=4" in notice.message
    for executor_id in (1, 2, 3):
        rig.store.update_pod(pod(rig, executor_id, "failed"))
    rig.store.notify_subscribers()
    rig.store.notify_subscribers()
    assert created(rig) == [1, 2, 3]
    assert len(notices) == 1
