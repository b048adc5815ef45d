"""The allocator's creation errors (SPARK-55075 and their classification), the 2018 rule as an
explicit policy, and adaptive batches, on the rig of Spark's suite (allocator_support.py).
"""

from __future__ import annotations

import logging

import pytest
from execpods.core import (
    AllocatorNotice,
    ApiThrottled,
    ApiUnavailable,
    CoreSettings,
    NoticeKind,
    PodAdmissionRejected,
    PodInvalid,
)
from execpods.core.testing import TEST_APP_ID

from .allocator_support import (
    RP,
    SPARK_SUITE,
    START,
    StepRecorder,
    created,
    pod,
    profile_of,
    spark_rig,
)
from .conftest import make_allocator_rig

# SPARK-55075 and execpods' classification of creation errors.


def test_a_refused_create_is_counted_reported_and_backed_off_without_ending_the_round() -> None:
    rig = spark_rig(profiles=True)
    notices: list[AllocatorNotice] = []
    rig.backend.add_notice_listener(notices.append)
    rig.pods.fail_next_create(PodAdmissionRejected("exceeded quota: pods", status=403))
    rig.allocator.set_totals({0: 3, RP: 2})
    # Executor 1 is refused; the rest of the round goes on, the other profile included.
    assert created(rig) == [2, 3, 4, 5]
    assert [profile_of(rig, i) for i in (2, 3, 4, 5)] == [0, 0, RP, RP]
    assert rig.told(NoticeKind.CREATE_REFUSED) == 1
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
    rig.backend.add_notice_listener(lambda n: waits.append(n.retry_in))
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
    rig.backend.add_notice_listener(notices.append)
    rig.pods.fail_next_create(ApiThrottled("too many requests", retry_after=7.0))
    rig.allocator.set_totals({0: 2, RP: 2})
    assert created(rig) == [], "the throttle holds the rest of the step back, unsent"
    assert notices[0].kind is NoticeKind.CREATE_THROTTLED
    assert notices[0].retry_in == 7.0
    rig.clock.advance(6.9)
    rig.store.notify_subscribers()
    assert created(rig) == []
    rig.clock.advance(0.2)
    rig.store.notify_subscribers()
    # The throttled create made no pod: its id 1 is handed back and used (issue 20, defect 11).
    assert created(rig) == [1, 2, 3, 4]
    assert [profile_of(rig, i) for i in (1, 2, 3, 4)] == [0, 0, RP, RP]
    assert rig.told(NoticeKind.CREATE_THROTTLED) == 1
    assert rig.ids.issued == 4


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
    assert rig.told(NoticeKind.CREATE_FAILED) == 1
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
    # A rate policy whose peak is 10/s: ceiling 10/s x 1 s x 5 = 50.
    settings = CoreSettings(batch_size=5)
    recorder = StepRecorder()
    rig = make_allocator_rig(settings, clock_start=START, runner=recorder, api_rate_ceiling=10)
    rig.allocator.set_total_expected_executors(100)
    assert recorder.steps == [5, 10, 20, 15], "slow start up to the round's ceiling"
    assert len(created(rig)) == 50


def test_a_round_is_sized_by_the_rate_policys_ceiling() -> None:
    settings = CoreSettings(batch_size=5)  # 12/s x 1 s x 5 = 60
    recorder = StepRecorder()
    rig = make_allocator_rig(settings, clock_start=START, runner=recorder, api_rate_ceiling=12)
    rig.allocator.set_total_expected_executors(100)
    assert recorder.steps == [5, 10, 20, 25]
    assert len(created(rig)) == 60


def test_adaptive_batches_halve_after_a_refusal_and_grow_again() -> None:
    settings = CoreSettings(batch_size=8)
    recorder = StepRecorder()
    rig = make_allocator_rig(settings, clock_start=START, runner=recorder, api_rate_ceiling=10)
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


def test_a_start_failure_halves_the_step(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="execpods.core.creator")
    settings = CoreSettings(batch_size=8)
    recorder = StepRecorder()
    rig = make_allocator_rig(settings, clock_start=START, runner=recorder, api_rate_ceiling=10)
    rig.allocator.set_total_expected_executors(8)
    rig.store.update_pod(pod(rig, 1, "failed"))
    for executor_id in range(2, 9):
        rig.store.update_pod(pod(rig, executor_id, "running"))
    rig.allocator.set_total_expected_executors(40)
    rig.store.notify_subscribers()
    assert "1 executors failed to start; creating more slowly." in caplog.messages
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
    """The 2018 rule's table, through the allocator: nothing while anything is pending or
    requested-but-unseen, else the shortfall, at most one batch (5)."""
    rig = spark_rig(RULE_2018)
    shown = running + pending
    rig.allocator.set_total_expected_executors(shown)
    while len(created(rig)) < shown:  # each batch runs before the next: the rule itself
        for executor_id in created(rig):
            rig.store.update_pod(pod(rig, executor_id, "running"))
        rig.store.notify_subscribers()
    for index, executor_id in enumerate(created(rig)):
        rig.store.update_pod(pod(rig, executor_id, "running" if index < running else "pending"))
    rig.store.notify_subscribers()
    if outstanding:  # created, never seen
        rig.allocator.set_total_expected_executors(shown + outstanding)
        assert len(created(rig)) == shown + outstanding
    before = len(created(rig))
    rig.allocator.set_total_expected_executors(target)
    rig.store.notify_subscribers()
    assert len(created(rig)) - before == expected
