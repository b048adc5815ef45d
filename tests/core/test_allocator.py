"""Newest Spark's ExecutorPodsAllocatorSuite, ported scenario by scenario (named after its tests).

The rig runs Spark's suite settings: batch size 5, executor idle timeout 10 s, adaptive batches
off, so every count below is Spark's. `RecordingDriver.known` plays the scheduler backend's
`getExecutorIds`. The 2018 rule and execpods' own additions follow, each as an explicit policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TypeVar

import pytest
from execpods.core import (
    AllocatorNotice,
    ApiThrottled,
    ApiUnavailable,
    CoreSettings,
    ExecutorCounts,
    ExecutorPod,
    NoticeKind,
    PodAdmissionRejected,
    PodInvalid,
    PodSelector,
    ResourceProfile,
    ResourceProfiles,
    SettingsError,
    executors_to_request,
    split_slots,
)
from execpods.core.labels import SPARK_LABELS
from execpods.core.testing import TEST_APP_ID, DeleteCall

from .conftest import AllocatorRig, make_allocator_rig

START = 1_767_225_600.0
IDLE = 10.0
SPARK_SUITE = CoreSettings(batch_size=5, executor_idle_timeout=IDLE, adaptive_batches=False)
RP = 1
APP_LABELS = {"spark-app-selector": TEST_APP_ID, "spark-role": "executor"}


def spark_rig(settings: CoreSettings = SPARK_SUITE, *, profiles: bool = False) -> AllocatorRig:
    declared = ResourceProfiles([ResourceProfile(id=RP, cores=4, memory_mib=2048)])
    return make_allocator_rig(settings, profiles=declared if profiles else None, clock_start=START)


def pod(rig: AllocatorRig, executor_id: int, phase: str, rp: int = 0) -> ExecutorPod:
    """An executor pod of profile `rp`, created now (by the rig's clock)."""
    labels = SPARK_LABELS.for_executor(TEST_APP_ID, executor_id)
    labels[SPARK_LABELS.resource_profile_id] = str(rp)
    return ExecutorPod(
        name=f"{TEST_APP_ID}-exec-{executor_id}",
        labels=labels,
        phase=phase,
        creation_timestamp=datetime.fromtimestamp(rig.clock.time(), UTC),
    )


def created(rig: AllocatorRig) -> list[int]:
    return rig.pods.created_executor_ids()


def profile_of(rig: AllocatorRig, executor_id: int) -> int:
    for manifest in rig.pods.created:
        labels = manifest["metadata"]["labels"]
        if labels["spark-exec-id"] == str(executor_id):
            return int(labels["spark-exec-resourceprofile-id"])
    raise AssertionError(f"executor {executor_id} was never created")


def deleted_ids(rig: AllocatorRig) -> list[list[int]]:
    """The executor ids of every delete-by-selector call, in order."""
    calls = []
    for call in rig.pods.deletes:
        assert call.selector is not None
        calls.append(sorted(int(i) for i in call.selector.label_in["spark-exec-id"]))
    return calls


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
    assert rig.allocator.stats.ids_issued == 5
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
    rig.clock.set_time(START + rig.allocator.pod_creation_timeout + 1)
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
    rig.clock.set_time(START + rig.allocator.pod_creation_timeout)
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


def test_a_total_for_an_undeclared_profile_is_refused_and_changes_nothing() -> None:
    rig = spark_rig()
    with pytest.raises(ValueError, match="resource profile 3 was never declared"):
        rig.allocator.set_totals({0: 2, 3: 1})
    assert rig.allocator.targets() == {0: 0}
    with pytest.raises(ValueError, match="negative"):
        rig.allocator.set_total_expected_executors(-1)


def test_allocation_maximum_stops_allocation_and_tells_the_driver_once() -> None:
    rig = spark_rig(replace(SPARK_SUITE, allocation_maximum=4))
    notices: list[AllocatorNotice] = []
    rig.allocator.add_notice_listener(notices.append)
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


# SPARK-55075 and execpods' classification of creation errors.


def test_a_refused_create_is_counted_reported_and_backed_off_without_ending_the_round() -> None:
    rig = spark_rig(profiles=True)
    notices: list[AllocatorNotice] = []
    rig.allocator.add_notice_listener(notices.append)
    rig.pods.fail_next_create(PodAdmissionRejected("exceeded quota: pods", status=403))
    rig.allocator.set_totals({0: 3, RP: 2})
    # Executor 1 is refused; the rest of the round goes on, the other profile included.
    assert created(rig) == [2, 3, 4, 5]
    assert [profile_of(rig, i) for i in (2, 3, 4, 5)] == [0, 0, RP, RP]
    assert rig.allocator.stats.refused == 1
    (notice,) = notices
    assert notice.kind is NoticeKind.CREATE_REFUSED
    assert notice.count == 1
    assert "exceeded quota" in notice.message
    assert notice.retry_in > 0
    for executor_id, rp in ((2, 0), (3, 0), (4, RP), (5, RP)):
        rig.store.update_pod(pod(rig, executor_id, "pending", rp))
    rig.store.notify_subscribers()
    assert created(rig) == [2, 3, 4, 5], "backing off: no retry in the next round"
    rig.clock.advance(notice.retry_in + 0.001)
    rig.store.notify_subscribers()
    assert created(rig) == [2, 3, 4, 5, 6]
    assert profile_of(rig, 6) == 0


def test_refusals_back_off_exponentially_with_jitter() -> None:
    rig = spark_rig()
    waits: list[float] = []
    rig.allocator.add_notice_listener(lambda n: waits.append(n.retry_in))
    rig.allocator.set_total_expected_executors(1)
    rig.store.replace_snapshot([pod(rig, 1, "running")])
    for _ in range(4):
        rig.pods.fail_next_create(PodInvalid("pods is invalid", status=422))
    rig.allocator.set_total_expected_executors(2)
    for _ in range(4):
        rig.store.notify_subscribers()
        rig.clock.advance(waits[-1] + 0.001)
    base = SPARK_SUITE.batch_delay
    assert len(waits) == 4
    for attempt, wait in enumerate(waits):
        assert base * 2**attempt / 2 <= wait <= base * 2**attempt
    assert len(set(waits)) == 4


def test_throttling_pauses_every_create_for_retry_after() -> None:
    rig = spark_rig(profiles=True)
    notices: list[AllocatorNotice] = []
    rig.allocator.add_notice_listener(notices.append)
    rig.pods.fail_next_create(ApiThrottled("too many requests", retry_after=7.0))
    rig.allocator.set_totals({0: 2, RP: 2})
    assert created(rig) == [2], "the throttled step ends the round: no profile creates more"
    assert notices[0].kind is NoticeKind.CREATE_THROTTLED
    assert notices[0].retry_in == 7.0
    rig.store.update_pod(pod(rig, 2, "pending"))
    rig.clock.advance(6.9)
    rig.store.notify_subscribers()
    assert created(rig) == [2]
    rig.clock.advance(0.2)
    rig.store.notify_subscribers()
    assert created(rig) == [2, 3, 4, 5]
    assert [profile_of(rig, i) for i in (3, 4, 5)] == [0, RP, RP]
    assert rig.allocator.stats.throttled == 1


def test_a_create_with_unknown_outcome_is_read_back_and_replaced_at_once() -> None:
    """Issue 11: a 5xx on a create used to hold its slot for the whole creation timeout."""
    rig = spark_rig()
    rig.pods.fail_next_create(ApiUnavailable("connection reset"))
    rig.allocator.set_total_expected_executors(1)
    assert rig.allocator.outstanding_pods == 1
    rig.clock.advance(SPARK_SUITE.batch_delay + 1)
    rig.store.notify_subscribers()
    # One read-back shows no pod 1: it is forgotten and replaced, long before the timeout.
    assert created(rig) == [2]
    assert rig.pods.deletes == []
    assert rig.allocator.outstanding_pods == 1  # the replacement, waiting to be seen


def test_a_create_whose_answer_was_lost_but_took_effect_is_not_repeated() -> None:
    rig = spark_rig()
    name = f"{TEST_APP_ID}-exec-1"
    rig.pods.pods[name] = pod(rig, 1, "Pending")  # the API made it, then the answer was lost
    rig.pods.fail_next_create(ApiUnavailable("connection reset"))
    rig.allocator.set_total_expected_executors(1)
    for _ in range(3):
        rig.clock.advance(SPARK_SUITE.batch_delay + 1)
        rig.store.notify_subscribers()
    assert created(rig) == [], "the read-back found it: it counts, nothing is created again"
    assert rig.allocator.outstanding_pods == 1
    rig.store.update_pod(pod(rig, 1, "running"))
    rig.store.notify_subscribers()
    assert rig.allocator.outstanding_pods == 0


def test_an_unexpected_error_is_counted_and_never_ends_the_round() -> None:
    rig = spark_rig()
    rig.pods.fail_next_create(RuntimeError("a bug"))  # type: ignore[arg-type]
    rig.allocator.set_total_expected_executors(2)
    assert rig.allocator.stats.failed == 1
    assert created(rig) == [2]
    rig.store.update_pod(pod(rig, 2, "running"))
    rig.store.notify_subscribers()
    assert created(rig) == [2, 3]


# The 2018 rule, as an explicit policy.

RULE_2018 = CoreSettings(batch_size=5, adaptive_batches=False, wait_for_pending_pods=True)


def test_the_2018_rule_waits_for_every_pending_pod_before_the_next_batch() -> None:
    rig = spark_rig(RULE_2018)
    rig.allocator.set_total_expected_executors(6)
    rig.store.update_pod(pod(rig, 1, "pending"))
    for executor_id in range(2, 6):
        rig.store.update_pod(pod(rig, executor_id, "running"))
    rig.store.notify_subscribers()
    assert created(rig) == [1, 2, 3, 4, 5]
    rig.store.update_pod(pod(rig, 1, "running"))
    rig.store.notify_subscribers()
    assert created(rig) == [1, 2, 3, 4, 5, 6]


# Adaptive batches (execpods' default).


def test_adaptive_batches_double_while_creates_go_cleanly() -> None:
    settings = CoreSettings(batch_size=5, api_qps=10)  # ceiling: 10/s x 1 s x 5 = 50
    recorder = StepRecorder()
    rig = make_allocator_rig(settings, clock_start=START, runner=recorder)
    rig.allocator.set_total_expected_executors(100)
    assert recorder.steps == [5, 10, 20, 15], "slow start up to the round's ceiling"
    assert len(created(rig)) == 50


T = TypeVar("T")


class StepRecorder:
    """A serial runner that records the size of every step it is given."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def run(self, tasks: Sequence[Callable[[], T]], limit: int) -> list[T]:
        self.steps.append(len(tasks))
        return [task() for task in tasks]


def test_adaptive_batches_halve_after_a_refusal_and_grow_again() -> None:
    settings = CoreSettings(batch_size=8, api_qps=10)
    recorder = StepRecorder()
    rig = make_allocator_rig(settings, clock_start=START, runner=recorder)
    rig.allocator.set_total_expected_executors(24)
    assert recorder.steps == [8, 16]
    for executor_id in created(rig):
        rig.store.update_pod(pod(rig, executor_id, "running"))
    rig.pods.fail_next_create(PodAdmissionRejected("exceeded quota", status=403))
    rig.allocator.set_total_expected_executors(100)
    rig.store.notify_subscribers()
    assert recorder.steps == [8, 16, 32], "the step with a refusal ends the round"
    assert len(created(rig)) == 24 + 31
    for executor_id in created(rig):
        rig.store.update_pod(pod(rig, executor_id, "running"))
    rig.clock.advance(120)
    rig.store.notify_subscribers()
    assert recorder.steps == [8, 16, 32, 16, 29], "halved to 16, then doubling again"


def test_a_start_failure_halves_the_step() -> None:
    settings = CoreSettings(batch_size=8, api_qps=10)
    recorder = StepRecorder()
    rig = make_allocator_rig(settings, clock_start=START, runner=recorder)
    rig.allocator.set_total_expected_executors(8)
    rig.store.update_pod(pod(rig, 1, "failed"))
    for executor_id in range(2, 9):
        rig.store.update_pod(pod(rig, executor_id, "running"))
    rig.allocator.set_total_expected_executors(40)
    rig.store.notify_subscribers()
    assert rig.allocator.stats.start_failures == 1
    assert recorder.steps == [8, 8, 16, 9], "16 after the clean step, halved to 8 by the failure"


# Kept from the earlier suite.


def test_setting_the_target_re_evaluates_at_once_when_nothing_is_outstanding() -> None:
    rig = spark_rig()
    rig.store.replace_snapshot([])
    rig.store.notify_subscribers()
    assert rig.pods.created == []
    rig.allocator.set_total_expected_executors(2)  # notifies the store: a round runs now
    assert created(rig) == [1, 2]
    rig.allocator.set_total_expected_executors(4)  # two outstanding: wait for the interval
    assert created(rig) == [1, 2]


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
def test_the_2018_batch_rule(
    target: int, running: int, pending: int, outstanding: int, expected: int
) -> None:
    counts = ExecutorCounts(running=running, pending=pending)
    assert (
        executors_to_request(
            target=target, counts=counts, outstanding_requests=outstanding, batch_size=5
        )
        == expected
    )
