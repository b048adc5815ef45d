"""Pending timeout decisions: once per executor, per action (wait, replace, lowerTarget), with a
notice that says how many, why they waited and what was done."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from execpods.core import (
    SPARK_LABELS,
    ExecutorPod,
    ExecutorPodsSnapshot,
    NoticeKind,
    PodCondition,
    SettingsError,
)
from execpods.core.pendingtimeout import PendingTimeout, PendingTimeoutSettings
from execpods.core.testing import pending_executor, running_executor

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
SCHEDULER = "0/3 nodes are available: 3 Insufficient cpu."


def pending(
    executor_id: int, *, created: float, profile: int = 0, stuck: bool = True
) -> ExecutorPod:
    pod = pending_executor(executor_id)
    labels = dict(pod.labels)
    labels[SPARK_LABELS.resource_profile_id] = str(profile)
    conditions = (
        (
            PodCondition(
                type="PodScheduled", status="False", reason="Unschedulable", message=SCHEDULER
            ),
        )
        if stuck
        else ()
    )
    return dataclasses.replace(
        pod,
        labels=labels,
        creation_timestamp=datetime.fromtimestamp(created, UTC),
        conditions=conditions,
    )


def timeout(action: str, after: str = "10min") -> PendingTimeout:
    settings = PendingTimeoutSettings.from_properties(
        {
            "execpods.executor.pendingTimeout": after,
            "execpods.executor.pendingTimeoutAction": action,
        }
    )
    return PendingTimeout(settings, labels=SPARK_LABELS)


def snapshot(*pods: ExecutorPod) -> ExecutorPodsSnapshot:
    return ExecutorPodsSnapshot.from_pods(pods)


PODS = (
    pending(1, created=T0),
    pending(2, created=T0 + 30, stuck=False),
    pending(3, created=T0 + 500),
    running_executor(4),
)


@pytest.mark.parametrize(
    ("action", "deletes", "lowered", "said"),
    [
        ("wait", (), {}, "still waiting for them"),
        ("replace", (1, 2), {}, "their pods are deleted and as many executors requested again"),
        ("lowerTarget", (1, 2), {0: 4}, "effective target lowered to 4"),
    ],
)
def test_each_action(
    action: str, deletes: tuple[int, ...], lowered: dict[int, int], said: str
) -> None:
    subject = timeout(action)
    early = subject.review(snapshot(*PODS), now=T0 + 599, live={0: 6})
    assert early.notices == ()
    decision = subject.review(snapshot(*PODS), now=T0 + 630, live={0: 6})
    assert decision.delete == deletes
    assert decision.lower == lowered
    (notice,) = decision.notices
    assert notice.kind is NoticeKind.PENDING_TIMEOUT
    assert notice.count == 2
    assert said in notice.message
    assert f"Unschedulable: {SCHEDULER}" in notice.message  # why they waited
    assert "no reason reported" in notice.message  # executor 2 was simply starting
    assert "(1,2)" in notice.message
    assert f"execpods.executor.pendingTimeoutAction={action}" in notice.message
    # once per executor: the next round says nothing more of them
    again = subject.review(snapshot(*PODS), now=T0 + 700, live={0: 6})
    assert again.notices == ()
    later = subject.review(snapshot(*PODS), now=T0 + 1100, live={0: 6})
    assert [n.count for n in later.notices] == [1]  # executor 3's turn
    assert subject.timed_out == 3


def test_a_lowered_target_holds_until_the_driver_sets_a_new_one() -> None:
    subject = timeout("lowerTarget")
    subject.review(snapshot(*PODS), now=T0 + 630, live={0: 6})
    assert subject.effective_target(0, 10) == 4
    assert subject.effective_target(0, 3) == 3
    assert subject.effective_target(1, 10) == 10
    subject.target_changed(0)
    assert subject.effective_target(0, 10) == 10


def test_profiles_are_told_apart_and_zero_is_never() -> None:
    subject = timeout("wait", after="1min")
    pods = (pending(1, created=T0), pending(2, created=T0, profile=1))
    decision = subject.review(snapshot(*pods), now=T0 + 61, live={})
    assert [(n.resource_profile_id, n.count) for n in decision.notices] == [(0, 1), (1, 1)]
    off = timeout("replace", after="0")
    assert not off.enabled
    assert off.review(snapshot(*pods), now=T0 + 10**6, live={}).delete == ()


def test_a_bad_action_names_its_property() -> None:
    with pytest.raises(
        SettingsError,
        match=r"pendingTimeoutAction='delete' is invalid: it must be wait, replace or lowerTarget",
    ):
        PendingTimeoutSettings.from_properties({"execpods.executor.pendingTimeoutAction": "delete"})
